//! Numbered places for the timer queue's entries, so that its due-time indexes name an
//! entry by a number of 4 bytes instead of by its key: a search of an index then compares
//! numbers, where it compared keys' texts behind two pointers (ADR 0053).
//!
//! A start-up's entries stay in the one block its load read them into. Later entries are
//! kept in chunks of [`PLACES_PER_CHUNK`], so that growing past a million never copies the
//! million entries into a block twice their size, as a single `Vec` would. A freed place
//! is taken again by the next entry (the last freed first).

/// Entries a chunk holds: a chunk is allocated whole, so the most left unused is one chunk.
const PLACES_PER_CHUNK: usize = 1_024;

/// The most entries an engine's queue holds: far beyond any memory (4 billion entries of
/// dozens of bytes), so reaching it is a fault, which aborts as a reference count that
/// would wrap does.
const PLACES_MAX: usize = u32::MAX as usize;

/// The place the `index`th entry of a load takes: its index, which must be below
/// [`PLACES_MAX`].
pub(super) fn loaded_place(index: usize) -> u32 {
    u32::try_from(index).ok().filter(|place| (*place as usize) < PLACES_MAX).unwrap_or_else(|| std::process::abort())
}

/// Values by place, each at the place [`Places::insert`] (or the load) gave it until it
/// is removed.
#[derive(Debug)]
pub(super) struct Places<T> {
    /// Places `0..loaded.len()`: a start-up's load, as it was read.
    loaded: Vec<Option<T>>,
    /// The places after them, a chunk at a time.
    chunks: Vec<Vec<Option<T>>>,
    /// Places whose value was removed, to be taken again.
    free: Vec<u32>,
}

impl<T> Default for Places<T> {
    fn default() -> Self {
        Self { loaded: Vec::new(), chunks: Vec::new(), free: Vec::new() }
    }
}

impl<T> Places<T> {
    /// A load's values, each at its index ([`loaded_place`]), in their own block: no copy,
    /// and no capacity left over.
    pub(super) fn loaded(values: Vec<T>) -> Self {
        // `Option<T>` is `T`'s size for the queue's entries (a key is never null), so this
        // reuses the block.
        let mut loaded: Vec<Option<T>> = values.into_iter().map(Some).collect();
        loaded.shrink_to_fit();
        Self { loaded, chunks: Vec::new(), free: Vec::new() }
    }

    /// Holds `value` at a free place, which it returns.
    pub(super) fn insert(&mut self, value: T) -> u32 {
        if let Some(place) = self.free.pop() {
            if let Some(slot) = self.slot_mut(place) {
                *slot = Some(value);
            }
            return place;
        }
        let chunked = self.chunks.last().map_or(0, |chunk| (self.chunks.len() - 1) * PLACES_PER_CHUNK + chunk.len());
        let next = self.loaded.len() + chunked;
        if next >= PLACES_MAX {
            std::process::abort();
        }
        match self.chunks.last_mut().filter(|chunk| chunk.len() < PLACES_PER_CHUNK) {
            Some(chunk) => chunk.push(Some(value)),
            None => {
                let mut chunk = Vec::with_capacity(PLACES_PER_CHUNK);
                chunk.push(Some(value));
                self.chunks.push(chunk);
            }
        }
        // Below `PLACES_MAX`, checked above.
        next as u32
    }

    /// Takes the value at `place` out; its place is free again.
    pub(super) fn remove(&mut self, place: u32) -> Option<T> {
        let value = self.slot_mut(place)?.take()?;
        self.free.push(place);
        Some(value)
    }

    pub(super) fn get(&self, place: u32) -> Option<&T> {
        let place = place as usize;
        match place.checked_sub(self.loaded.len()) {
            None => self.loaded.get(place)?.as_ref(),
            Some(chunked) => self.chunks.get(chunked / PLACES_PER_CHUNK)?.get(chunked % PLACES_PER_CHUNK)?.as_ref(),
        }
    }

    pub(super) fn get_mut(&mut self, place: u32) -> Option<&mut T> {
        self.slot_mut(place)?.as_mut()
    }

    /// Every value held, in the order of their places.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.loaded.iter().chain(self.chunks.iter().flatten()).flatten()
    }

    fn slot_mut(&mut self, place: u32) -> Option<&mut Option<T>> {
        let place = place as usize;
        match place.checked_sub(self.loaded.len()) {
            None => self.loaded.get_mut(place),
            Some(chunked) => self.chunks.get_mut(chunked / PLACES_PER_CHUNK)?.get_mut(chunked % PLACES_PER_CHUNK),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_keeps_its_place_until_removed_and_a_freed_place_is_taken_again() {
        let mut places = Places::loaded(vec![0_u32, 1, 2]);
        let given: Vec<u32> = (3..PLACES_PER_CHUNK as u32 + 6).map(|value| places.insert(value)).collect();
        assert_eq!(given, (3..PLACES_PER_CHUNK as u32 + 6).collect::<Vec<_>>(), "numbered in turn, across chunks");
        assert_eq!(places.chunks.len(), 2);
        assert_eq!(places.get(1), Some(&1), "a loaded place");
        assert_eq!(places.get(PLACES_PER_CHUNK as u32 + 4), Some(&(PLACES_PER_CHUNK as u32 + 4)));
        assert_eq!(places.remove(5), Some(5));
        assert_eq!(places.remove(5), None, "removed once");
        assert_eq!(places.get(5), None);
        let held: Vec<u32> = places.iter().copied().collect();
        assert_eq!(held.len(), PLACES_PER_CHUNK + 5, "every value but the removed one");
        assert!(!held.contains(&5) && held.windows(2).all(|pair| pair[0] < pair[1]), "in the order of places");
        assert_eq!(places.remove(2), Some(2));
        assert_eq!(places.insert(100), 2, "the last freed place first, a loaded one too");
        assert_eq!(places.insert(101), 5);
        assert_eq!(places.insert(102), PLACES_PER_CHUNK as u32 + 6, "then a new one");
        if let Some(value) = places.get_mut(5) {
            *value += 1;
        }
        assert_eq!((places.get(5), places.get(2)), (Some(&102), Some(&100)));
        assert_eq!(places.get(u32::MAX), None, "a place never given holds nothing");
        let values: Vec<Option<&u32>> = (0..6).map(|place| places.get(place)).collect();
        assert_eq!(values, [Some(&0), Some(&1), Some(&100), Some(&3), Some(&4), Some(&102)]);
    }

    #[test]
    fn a_load_keeps_its_block() {
        let values: Vec<&'static str> = vec!["a"; 10];
        let block = values.as_ptr() as usize;
        let places = Places::loaded(values);
        assert_eq!(places.loaded.as_ptr() as usize, block, "not copied");
        assert_eq!(places.loaded.capacity(), 10);
    }
}
