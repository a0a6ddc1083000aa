//! An element of the queue's indexes: a due time in nanoseconds and the place of the entry
//! it belongs to, in 12 bytes where the pair `(u64, u32)` takes 16 (aligned to 8). Every
//! armed interval heartbeat has two of them (ADR 0063).

/// Three words of 32 bits ordered as written: the due time's high and low halves, then the
/// place, so the derived order is the pair's (equal due times in the order of their places).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Due([u32; 3]);

/// The sign bit of a wall time in nanoseconds, flipped so that unsigned order is signed order.
const SIGN_BIT: u64 = 1 << 63;

impl Due {
    /// A monotonic deadline in nanoseconds at `place`.
    pub(super) fn mono(nanos: u64, place: u32) -> Self {
        Self::of(nanos, place)
    }

    /// A wall due time in nanoseconds since the Unix epoch (before it too) at `place`.
    pub(super) fn wall(nanos: i64, place: u32) -> Self {
        Self::of(nanos.cast_unsigned() ^ SIGN_BIT, place)
    }

    fn of(nanos: u64, place: u32) -> Self {
        // The two halves of 64 bits: each cast keeps exactly the 32 it names.
        #[allow(clippy::cast_possible_truncation)]
        Self([(nanos >> 32) as u32, nanos as u32, place])
    }

    fn nanos(self) -> u64 {
        (u64::from(self.0[0]) << 32) | u64::from(self.0[1])
    }

    /// The due time of a [`Due::mono`].
    pub(super) fn mono_nanos(self) -> u64 {
        self.nanos()
    }

    /// The due time of a [`Due::wall`].
    pub(super) fn wall_nanos(self) -> i64 {
        (self.nanos() ^ SIGN_BIT).cast_signed()
    }

    pub(super) fn place(self) -> u32 {
        self.0[2]
    }

    /// The same due time at place 0 (a test compares two queues' times, not their places).
    #[cfg(test)]
    pub(super) fn without_place(self) -> Self {
        Self([self.0[0], self.0[1], 0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_element_is_12_bytes() {
        assert_eq!(std::mem::size_of::<Due>(), 12);
        assert_eq!(std::mem::size_of::<(u64, u32)>(), 16);
    }

    #[test]
    fn elements_order_as_their_pairs_and_give_them_back() {
        let walls =
            [i64::MIN, -1_000_000_007, -1, 0, 1, 4_294_967_295, 4_294_967_296, 1_767_225_600_000_000_000, i64::MAX];
        let monos = [0, 1, 4_294_967_295, 4_294_967_296, 86_400_000_000_000, u64::MAX - 1, u64::MAX];
        assert_order_as_pairs(&walls, Due::wall, Due::wall_nanos, "wall times, negative ones included");
        assert_order_as_pairs(&monos, Due::mono, Due::mono_nanos, "monotonic deadlines");
    }

    /// Elements made of each of `times` with each of a few places sort as the pairs do, and
    /// give the pairs back.
    fn assert_order_as_pairs<T: Copy + Ord + std::fmt::Debug>(
        times: &[T],
        element: fn(T, u32) -> Due,
        time: fn(Due) -> T,
        what: &str,
    ) {
        let places = [0, 1, 7, u32::MAX];
        let mut pairs: Vec<(T, u32)> = times.iter().flat_map(|&at| places.map(|place| (at, place))).collect();
        pairs.reverse();
        let mut elements: Vec<Due> = pairs.iter().map(|&(at, place)| element(at, place)).collect();
        pairs.sort_unstable();
        elements.sort_unstable();
        let back: Vec<(T, u32)> = elements.iter().map(|&due| (time(due), due.place())).collect();
        assert_eq!(back, pairs, "{what}");
    }
}
