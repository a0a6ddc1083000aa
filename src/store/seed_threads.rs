//! A large seed's per-definition work on every core: hashing and copying a million
//! definitions was a second or more of a first seed on one thread, in every store.

/// Definitions a thread takes, at the least: fewer are not worth a thread (and keep the
/// simulator's small configs on one).
pub(crate) const SEED_ROWS_PER_THREAD_MIN: usize = 50_000;

/// `each` of `items`, in their order, on as many threads as the machine has cores when
/// there are many. Each item is worked alone, so the result is the same on any machine.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_items_come_back_in_their_order_whatever_the_threads() {
        let items: Vec<u64> = (0..(3 * SEED_ROWS_PER_THREAD_MIN as u64 + 7)).collect();
        let doubled = map_in_order(&items, |item| item * 2);
        assert_eq!(doubled.len(), items.len());
        assert!(doubled.iter().zip(&items).all(|(twice, item)| *twice == item * 2));
        assert_eq!(map_in_order(&items[..3], |item| item + 1), vec![1, 2, 3]);
        assert!(map_in_order(&items[..0], |item| *item).is_empty());
    }
}
