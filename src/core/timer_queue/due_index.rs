//! One of the queue's two indexes of due times: sorted blocks of up to
//! [`BLOCK_ELEMENTS_MAX`] elements, each block an allocation of exactly that many.
//!
//! A `BTreeSet` of 12-byte elements holds eleven in a leaf of 144 bytes, which the
//! allocator rounds up to 160: 15.2 B an element with every node full, as a start-up's load
//! leaves them. A block here is 1,536 bytes, one of jemalloc's size classes exactly: 12.2 B
//! an element when full (ADR 0063). Blocks split by random inserts are, like a B-tree's
//! nodes, about two-thirds full: by that reckoning about 17 B, where a B-tree's are 21.
//!
//! Each block's first element is kept apart, in order, so a search reads one small array
//! and then one block, as a B-tree's search reads a node at each of its levels.

use std::collections::VecDeque;

use super::due::Due;

/// 1,536 bytes of 12-byte elements: a size class of jemalloc's (the daemon's allocator,
/// ADR 0058), so a block wastes nothing at the allocator.
#[cfg(not(madsim))]
const BLOCK_ELEMENTS_MAX: usize = 128;
/// In the simulator, whose seeds arm a few dozen heartbeats at most, blocks of four, so that
/// its seeds split and merge blocks under every fault and clock jump, as a million
/// heartbeats do in production. The order of the elements, and so every trace, is the same
/// whatever a block holds (ADR 0063).
#[cfg(madsim)]
const BLOCK_ELEMENTS_MAX: usize = 4;

/// A block of a quarter of the most or fewer merges with a neighbour when their elements
/// fit in one block, so that removals cannot leave many blocks nearly empty (each still
/// holds its whole allocation).
const BLOCK_ELEMENTS_MERGE_MAX: usize = BLOCK_ELEMENTS_MAX / 4;

#[derive(Debug, Default)]
pub(super) struct DueIndex {
    /// Each block's first element, in the blocks' order.
    firsts: VecDeque<Due>,
    /// Sorted, none empty, each of capacity [`BLOCK_ELEMENTS_MAX`]; every element of a block
    /// is below the next block's first.
    blocks: VecDeque<Vec<Due>>,
    len: usize,
}

fn new_block() -> Vec<Due> {
    Vec::with_capacity(BLOCK_ELEMENTS_MAX)
}

impl DueIndex {
    /// The index of `sorted` (ascending, each element once), its blocks full.
    pub(super) fn from_sorted(sorted: &[Due]) -> Self {
        let mut index = Self { len: sorted.len(), ..Self::default() };
        for chunk in sorted.chunks(BLOCK_ELEMENTS_MAX) {
            let mut block = new_block();
            block.extend_from_slice(chunk);
            index.firsts.push_back(chunk[0]);
            index.blocks.push_back(block);
        }
        index
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn first(&self) -> Option<Due> {
        self.firsts.front().copied()
    }

    pub(super) fn pop_first(&mut self) -> Option<Due> {
        let first = self.first()?;
        self.remove_at(0, 0);
        Some(first)
    }

    /// The block `due` belongs in: the last whose first element is not above it (the first
    /// block when it is below them all).
    fn block_of(&self, due: &Due) -> usize {
        self.firsts.partition_point(|first| first <= due).saturating_sub(1)
    }

    /// Adds `due`; false when it was there already.
    pub(super) fn insert(&mut self, due: Due) -> bool {
        if self.blocks.is_empty() {
            let mut block = new_block();
            block.push(due);
            self.firsts.push_back(due);
            self.blocks.push_back(block);
            self.len = 1;
            return true;
        }
        let at = self.block_of(&due);
        let Some(block) = self.blocks.get_mut(at) else { return false };
        let Err(position) = block.binary_search(&due) else { return false };
        if block.len() == BLOCK_ELEMENTS_MAX {
            // Split in halves, then insert into the half it belongs in.
            let mut upper = new_block();
            upper.extend(block.drain(BLOCK_ELEMENTS_MAX / 2..));
            let (target, position) = if position <= BLOCK_ELEMENTS_MAX / 2 {
                (block, position)
            } else {
                (&mut upper, position - BLOCK_ELEMENTS_MAX / 2)
            };
            target.insert(position, due);
            self.firsts.insert(at + 1, upper[0]);
            self.blocks.insert(at + 1, upper);
        } else {
            block.insert(position, due);
        }
        if position == 0 {
            self.firsts[at] = self.blocks[at][0];
        }
        self.len += 1;
        true
    }

    /// Takes `due` out; false when it was not there.
    pub(super) fn remove(&mut self, due: &Due) -> bool {
        if self.blocks.is_empty() {
            return false;
        }
        let at = self.block_of(due);
        let Some(Ok(position)) = self.blocks.get(at).map(|block| block.binary_search(due)) else { return false };
        self.remove_at(at, position);
        true
    }

    /// Takes out the element at `position` of block `at` (both there), then drops the block
    /// if it is empty, or merges it with a neighbour if it is small and both fit in one.
    fn remove_at(&mut self, at: usize, position: usize) {
        let block = &mut self.blocks[at];
        block.remove(position);
        self.len -= 1;
        if block.is_empty() {
            self.blocks.remove(at);
            self.firsts.remove(at);
            return;
        }
        self.firsts[at] = block[0];
        if block.len() > BLOCK_ELEMENTS_MERGE_MAX {
            return;
        }
        let fits = |index: &Self, with: usize| index.blocks[at].len() + index.blocks[with].len() <= BLOCK_ELEMENTS_MAX;
        if at + 1 < self.blocks.len() && fits(self, at + 1) {
            self.merge_into_previous(at + 1);
        } else if at > 0 && fits(self, at - 1) {
            self.merge_into_previous(at);
        }
    }

    /// Moves block `at`'s elements to the end of the block before it, and drops it.
    fn merge_into_previous(&mut self, at: usize) {
        let Some(moved) = self.blocks.remove(at) else { return };
        self.firsts.remove(at);
        self.blocks[at - 1].extend_from_slice(&moved);
    }

    /// Every element, in order.
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = &Due> {
        self.blocks.iter().flatten()
    }

    /// Whether every block is as documented, and the count and firsts true.
    #[cfg(test)]
    fn holds(&self) -> bool {
        let all: Vec<Due> = self.iter().copied().collect();
        all.windows(2).all(|pair| pair[0] < pair[1])
            && all.len() == self.len
            && self.blocks.len() == self.firsts.len()
            && self
                .blocks
                .iter()
                .zip(&self.firsts)
                .all(|(block, first)| !block.is_empty() && block[0] == *first && block.capacity() == BLOCK_ELEMENTS_MAX)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn due(n: u64) -> Due {
        Due::mono(n / 3, u32::try_from(n % 3).expect("below 3"))
    }

    /// The index and a `BTreeSet` given the same operations agree at every step.
    #[test]
    fn it_does_what_a_btree_set_does() {
        let mut index = DueIndex::default();
        let mut set = BTreeSet::new();
        // A small generator of its own: the order of operations is what matters, not its quality.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |below: u64| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % below
        };
        for round in 0..60_000 {
            let value = due(next(3_000));
            match next(10) {
                0..=4 => assert_eq!(index.insert(value), set.insert(value), "insert at {round}"),
                5..=7 => assert_eq!(index.remove(&value), set.remove(&value), "remove at {round}"),
                _ => assert_eq!(index.pop_first(), set.pop_first(), "pop at {round}"),
            }
            assert_eq!((index.len(), index.first()), (set.len(), set.first().copied()), "at {round}");
            if round % 1_000 == 0 {
                assert!(index.holds(), "at {round}");
                assert!(index.iter().eq(set.iter()), "at {round}");
            }
        }
        assert!(index.holds());
        assert!(index.iter().eq(set.iter()));
    }

    #[test]
    fn a_load_fills_its_blocks_and_removals_do_not_leave_them_nearly_empty() {
        let sorted: Vec<Due> = (0..10_000).map(due).collect();
        let mut index = DueIndex::from_sorted(&sorted);
        assert!(index.holds());
        assert_eq!(index.blocks.len(), 10_000_usize.div_ceil(BLOCK_ELEMENTS_MAX), "full blocks");
        assert!(index.iter().eq(sorted.iter()));
        // Every other element out, then three of each four left: the blocks merge as they go.
        for value in sorted.iter().step_by(2) {
            assert!(index.remove(value));
        }
        for (n, value) in sorted.iter().skip(1).step_by(2).enumerate() {
            if n % 4 != 0 {
                assert!(index.remove(value));
            }
        }
        assert!(index.holds());
        assert_eq!(index.len(), 1_250);
        let blocks = index.blocks.len();
        assert!(blocks * BLOCK_ELEMENTS_MAX <= 4 * index.len(), "{blocks} blocks for {} elements", index.len());
        while index.pop_first().is_some() {}
        assert!(index.holds() && index.blocks.is_empty() && index.first().is_none());
        assert!(!index.remove(&due(5)));
    }

    #[test]
    fn an_element_below_every_block_goes_first() {
        let mut index = DueIndex::from_sorted(&(100..400).map(due).collect::<Vec<_>>());
        assert!(index.insert(due(7)));
        assert!(!index.insert(due(7)), "once");
        assert_eq!(index.first(), Some(due(7)));
        assert!(index.holds());
    }
}
