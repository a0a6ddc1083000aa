//! A large seed's per-definition work on every core: hashing, copying and sorting a
//! million definitions was a second or more of a first seed on one thread, in every store.

/// Definitions a thread takes, at the least: fewer are not worth a thread (and keep the
/// simulator's small configs on one).
pub(crate) const SEED_ROWS_PER_THREAD_MIN: usize = 50_000;

/// `each` of `items`, in their order, on as many threads as the machine has cores when
/// there are many. Each item is worked alone, so the result is the same on any machine.
// The SQL stores' fingerprints use it; the simulator's build (madsim) has none of them.
#[cfg(not(madsim))]
pub(crate) fn map_in_order<T: Sync, R: Send>(items: &[T], each: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let threads = cores.min(items.len() / SEED_ROWS_PER_THREAD_MIN);
    if threads <= 1 {
        return items.iter().map(each).collect();
    }
    let part = items.len().div_ceil(threads);
    let each = &each;
    std::thread::scope(|scope| {
        let parts: Vec<_> =
            items.chunks(part).map(|chunk| scope.spawn(move || chunk.iter().map(each).collect::<Vec<R>>())).collect();
        let mut all = Vec::with_capacity(items.len());
        for part in parts {
            // The work of one item cannot fail; a panic there is a bug, and stays one.
            all.extend(part.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        }
        all
    })
}

/// `check` of each of `items`, on as many threads as the machine has cores when there are
/// many; the first failure in the items' order.
#[cfg(not(madsim))]
pub(crate) fn check_each<T: Sync, E: Send>(items: &[T], check: impl Fn(&T) -> Result<(), E> + Sync) -> Result<(), E> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let threads = cores.min(items.len() / SEED_ROWS_PER_THREAD_MIN);
    if threads <= 1 {
        return items.iter().try_for_each(check);
    }
    let part = items.len().div_ceil(threads);
    let check = &check;
    std::thread::scope(|scope| {
        let parts: Vec<_> =
            items.chunks(part).map(|chunk| scope.spawn(move || chunk.iter().try_for_each(check))).collect();
        // The check of one item cannot panic; a panic there is a bug, and stays one.
        parts.into_iter().try_for_each(|part| part.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

/// Each of `items` mapped, sorted by `key` (stable: equal keys keep the items' order), built
/// and sorted on every core when there are many: each thread sorts its part and one pass
/// merges them. A map built from the result finds it sorted already; sorting a million
/// keys on one thread was most of a first seed into the memory store. Each thread maps
/// with a mapper of its own from `mapper`, which may keep what it met (a seed's pool of
/// texts), and is given each item's place in `items` with it.
pub(crate) fn map_sorted<'a, T: Sync, R: Send, K: Ord, M: FnMut(usize, &'a T) -> R>(
    items: &'a [T],
    mapper: impl Fn() -> M + Sync,
    key: impl Fn(&R) -> &K + Sync,
) -> Vec<R> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let threads = cores.min(items.len() / SEED_ROWS_PER_THREAD_MIN);
    // A part's items with their places in `items`, mapped and sorted.
    let sorted = |first: usize, chunk: &'a [T]| {
        let mut map = mapper();
        let mut part: Vec<R> = chunk.iter().enumerate().map(|(place, item)| map(first + place, item)).collect();
        part.sort_by(|a, b| key(a).cmp(key(b)));
        part
    };
    if threads <= 1 {
        return sorted(0, items);
    }
    let part = items.len().div_ceil(threads);
    let sorted = &sorted;
    let parts: Vec<Vec<R>> = std::thread::scope(|scope| {
        let parts: Vec<_> =
            items.chunks(part).enumerate().map(|(n, chunk)| scope.spawn(move || sorted(n * part, chunk))).collect();
        // The work of one item cannot fail; a panic there is a bug, and stays one.
        parts.into_iter().map(|part| part.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    merge(parts, &key)
}

/// One sorted list of sorted `parts`; of equal keys, an earlier part's come first.
fn merge<R, K: Ord>(parts: Vec<Vec<R>>, key: &impl Fn(&R) -> &K) -> Vec<R> {
    let mut all = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    let mut heads: Vec<std::iter::Peekable<std::vec::IntoIter<R>>> =
        parts.into_iter().map(|part| part.into_iter().peekable()).collect();
    loop {
        // The part whose next key is lowest, the earliest on a tie (a few parts: a scan).
        let mut lowest: Option<(usize, &K)> = None;
        for (index, head) in heads.iter_mut().enumerate() {
            if let Some(next) = head.peek() {
                if lowest.is_none_or(|(_, low)| key(next) < low) {
                    lowest = Some((index, key(next)));
                }
            }
        }
        let Some((index, _)) = lowest else { return all };
        all.extend(heads[index].next());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(madsim))]
    #[test]
    fn many_items_come_back_in_their_order_whatever_the_threads() {
        let items: Vec<u64> = (0..(3 * SEED_ROWS_PER_THREAD_MIN as u64 + 7)).collect();
        let doubled = map_in_order(&items, |item| item * 2);
        assert_eq!(doubled.len(), items.len());
        assert!(doubled.iter().zip(&items).all(|(twice, item)| *twice == item * 2));
        assert_eq!(map_in_order(&items[..3], |item| item + 1), vec![1, 2, 3]);
        assert!(map_in_order(&items[..0], |item| *item).is_empty());
    }

    #[cfg(not(madsim))]
    #[test]
    fn a_check_of_many_items_answers_their_first_failure() {
        let items: Vec<u64> = (0..(3 * SEED_ROWS_PER_THREAD_MIN as u64 + 7)).collect();
        fn failing(bad: &[u64]) -> impl Fn(&u64) -> Result<(), u64> + Sync + '_ {
            move |item| if bad.contains(item) { Err(*item) } else { Ok(()) }
        }
        assert_eq!(check_each(&items, failing(&[])), Ok(()));
        // Failures in the last thread's part and the first's: the earlier item is told.
        let last = *items.last().expect("items");
        assert_eq!(check_each(&items, failing(&[last, 5])), Err(5));
        assert_eq!(check_each(&items, failing(&[last])), Err(last));
        assert_eq!(check_each(&items[..3], failing(&[2, 1])), Err(1));
    }

    #[test]
    fn many_items_come_back_sorted_and_equal_keys_keep_their_order() {
        // Keys that repeat across the threads' parts, so the merge meets ties.
        let items: Vec<u64> = (0..(2 * SEED_ROWS_PER_THREAD_MIN as u64 + 11)).rev().collect();
        let rows = map_sorted(&items, || |_, item: &u64| (item % 1_000, *item), |row| &row.0);
        assert_eq!(rows.len(), items.len());
        assert!(rows.windows(2).all(|pair| pair[0].0 <= pair[1].0), "sorted by key");
        // The items came in falling order: among equal keys, the higher item came first.
        assert!(rows.windows(2).all(|pair| pair[0].0 < pair[1].0 || pair[0].1 > pair[1].1), "stable");
        assert_eq!(map_sorted(&[3_u64, 1, 2], || |_, item: &u64| *item, |item| item), vec![1, 2, 3]);
        // Each item's place in `items`, whichever thread mapped it.
        let places = map_sorted(&items, || |place, item: &u64| (*item, place), |row| &row.0);
        assert!(places.iter().all(|(item, place)| items[*place] == *item));
    }
}
