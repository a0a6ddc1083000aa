//! An immutable text shared by reference count, behind a pointer of 8 bytes, with a header
//! of 8 bytes (a 32-bit count and length) where `ArcStr`'s is 16.
//!
//! Every heartbeat id is one of these, and a million heartbeats hold a million: an id of up
//! to 16 bytes fits the allocator's 32-byte block where `ArcStr`'s header put it in a 48-byte
//! one (`docs/performance.md`, 2026-11-27). Ids are at most 64 characters, so neither count
//! nor length needs more than 32 bits; a count that could wrap aborts, as `Arc`'s does.
//!
//! The text is followed by zero bytes up to a multiple of 8, so that two texts compare a
//! word at a time, inline, where `memcmp` was a call for each of the twenty comparisons of a
//! map lookup (a tenth of a burst's CPU, `docs/performance.md`). The padding costs no memory:
//! the allocator's blocks hold 8 bytes more than a multiple of 16.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{self, AtomicU32};

/// The text's bytes follow the header in one allocation, then zeros up to a multiple of
/// [`WORD_BYTES`].
#[repr(C)]
struct Header {
    count: AtomicU32,
    len: u32,
}

/// Far below `u32::MAX`, so that the threads that pass it before one of them aborts cannot
/// wrap the count (the margin `Arc` keeps).
const COUNT_MAX: u32 = i32::MAX as u32;

/// Texts are compared this many bytes at a time.
const WORD_BYTES: usize = 8;

pub struct SharedText {
    header: NonNull<Header>,
}

// SAFETY: the text is never written after `new`, and the count is atomic, as in `Arc<str>`.
unsafe impl Send for SharedText {}
// SAFETY: as above; `&SharedText` gives only `&str` and clones.
unsafe impl Sync for SharedText {}

impl SharedText {
    /// A text of its own, counted once; `None` past `u32::MAX` bytes.
    pub fn new(text: &str) -> Option<Self> {
        let len = u32::try_from(text.len()).ok()?;
        let layout = layout(text.len())?;
        // SAFETY: the layout is not zero-sized (it holds the header).
        let raw = unsafe { alloc(layout) };
        let Some(header) = NonNull::new(raw.cast::<Header>()) else { handle_alloc_error(layout) };
        // SAFETY: `raw` is a fresh allocation of `layout`, aligned for the header, followed by
        // room for `len` bytes rounded up to whole words (`layout`); `text` cannot overlap it.
        unsafe {
            header.as_ptr().write(Header { count: AtomicU32::new(1), len });
            let bytes = raw.add(std::mem::size_of::<Header>());
            std::ptr::write_bytes(bytes, 0, words(text.len()) * WORD_BYTES);
            std::ptr::copy_nonoverlapping(text.as_ptr(), bytes, text.len());
        }
        Some(Self { header })
    }

    pub fn as_str(&self) -> &str {
        let len = self.header().len as usize;
        // SAFETY: the header is followed by the `len` bytes of the `str` copied in `new`, never
        // written since; the pointer is the allocation's own, so it spans them.
        unsafe {
            let bytes = self.header.as_ptr().cast::<u8>().add(std::mem::size_of::<Header>());
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(bytes, len))
        }
    }

    /// Whether the two are one allocation (and so equal without reading either).
    pub fn ptr_eq(one: &Self, other: &Self) -> bool {
        one.header == other.header
    }

    fn header(&self) -> &Header {
        // SAFETY: the allocation lives while any clone does, and this is one.
        unsafe { self.header.as_ref() }
    }

    /// The text's `index`th word, its bytes in order from the most significant (zeros past
    /// the text's end), so that words order as the bytes they hold.
    fn word(&self, index: usize) -> u64 {
        debug_assert!(index < words(self.header().len as usize));
        // SAFETY: `index` is below the text's word count (every caller's loop bound), and the
        // allocation holds that many whole words after the header (`layout`), written in `new`.
        let bytes = unsafe {
            self.header
                .as_ptr()
                .cast::<u8>()
                .add(std::mem::size_of::<Header>() + index * WORD_BYTES)
                .cast::<[u8; WORD_BYTES]>()
                .read_unaligned()
        };
        u64::from_be_bytes(bytes)
    }
}

/// Whole words a text of `len` bytes spans.
fn words(len: usize) -> usize {
    len.div_ceil(WORD_BYTES)
}

/// The allocation of a text of `len` bytes; `None` only when its size overflows.
fn layout(len: usize) -> Option<Layout> {
    let padded = words(len).checked_mul(WORD_BYTES)?;
    let (layout, _) = Layout::new::<Header>().extend(Layout::array::<u8>(padded).ok()?).ok()?;
    Some(layout.pad_to_align())
}

impl Clone for SharedText {
    fn clone(&self) -> Self {
        // Relaxed, as `Arc`: a new reference comes from an existing one, which keeps the
        // allocation alive; nothing else is published.
        if self.header().count.fetch_add(1, atomic::Ordering::Relaxed) > COUNT_MAX {
            std::process::abort();
        }
        Self { header: self.header }
    }
}

impl Drop for SharedText {
    fn drop(&mut self) {
        if self.header().count.fetch_sub(1, atomic::Ordering::Release) != 1 {
            return;
        }
        // Every other clone's last use happens before the text is freed.
        atomic::fence(atomic::Ordering::Acquire);
        // `new` made this layout from the same length, so it is there; were it not, the
        // text would leak rather than be freed with a wrong layout.
        if let Some(layout) = layout(self.header().len as usize) {
            // SAFETY: the last reference: allocated in `new` with this layout.
            unsafe { dealloc(self.header.as_ptr().cast::<u8>(), layout) };
        }
    }
}

impl Deref for SharedText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for SharedText {
    fn eq(&self, other: &Self) -> bool {
        let len = self.header().len;
        Self::ptr_eq(self, other)
            || (len == other.header().len
                && (0..words(len as usize)).all(|index| self.word(index) == other.word(index)))
    }
}

impl Eq for SharedText {}

impl Ord for SharedText {
    // Inline, as is the word loop below: a search of one of the driver's maps compares two
    // dozen keys, and a call for each comparison cost the driver 2.5 % of its instructions
    // (ADR 0053). The copies of one text that keys share (every key of an agent holds its
    // agent's id) compare by their pointers.
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        if Self::ptr_eq(self, other) {
            return Ordering::Equal;
        }
        self.cmp_words(other)
    }
}

impl SharedText {
    #[inline]
    fn cmp_words(&self, other: &Self) -> Ordering {
        // The first unequal word orders them as their first unequal byte would. When the
        // shorter text's words are all equal to the longer's, it is a prefix of the longer
        // (whose bytes over its padding are zeros too), so the shorter comes first.
        let (len, other_len) = (self.header().len, other.header().len);
        for index in 0..words(len.min(other_len) as usize) {
            match self.word(index).cmp(&other.word(index)) {
                Ordering::Equal => continue,
                unequal => return unequal,
            }
        }
        len.cmp(&other_len)
    }
}

impl PartialOrd for SharedText {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Hash for SharedText {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for SharedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SharedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of(value: &impl Hash) -> u64 {
        let mut hasher = DefaultHasher::new();
        value.hash(&mut hasher);
        hasher.finish()
    }

    #[test]
    fn is_a_thin_pointer_with_a_header_of_eight_bytes() {
        assert_eq!(std::mem::size_of::<SharedText>(), 8);
        assert_eq!(std::mem::size_of::<Option<SharedText>>(), 8);
        assert_eq!(layout(12).map(|layout| layout.size()), Some(24), "check-999999: 8 + 12 bytes + 4 of padding");
        assert_eq!(layout(16).map(|layout| layout.size()), Some(24), "an id of 16 bytes is not padded");
        assert_eq!(layout(0).map(|layout| (layout.size(), layout.align())), Some((8, 4)));
    }

    #[test]
    fn holds_its_text_and_behaves_as_it() {
        for text in ["", "a", "check-inbox", "ops-bot-with-a-rather-long-name-of-sixty-four-characters-exactly"] {
            let shared = SharedText::new(text).expect("short");
            assert_eq!(shared.as_str(), text);
            assert_eq!(&*shared, text);
            assert_eq!(shared.to_string(), text);
            assert_eq!(format!("{shared:?}"), format!("{text:?}"));
            assert_eq!(hash_of(&shared), hash_of(&text), "hashed as its text");
        }
    }

    #[test]
    fn compares_as_its_text_and_copies_without_reading_it() {
        let (a, b) = (SharedText::new("alpha").expect("short"), SharedText::new("beta").expect("short"));
        let other_a = SharedText::new("alpha").expect("short");
        assert!(a < b && b > other_a);
        assert_eq!(a, other_a, "equal texts in two allocations are equal");
        assert!(!SharedText::ptr_eq(&a, &other_a));
        let copy = a.clone();
        assert!(SharedText::ptr_eq(&a, &copy));
        assert_eq!(a.cmp(&copy), Ordering::Equal);
    }

    #[test]
    fn orders_and_equals_as_its_bytes_across_words_lengths_and_nuls() {
        // Texts that share prefixes across a word's boundary, differ only past it, end in
        // NULs (which the padding also holds), or hold bytes past 0x7f.
        let mut texts: Vec<String> = [
            "",
            "a",
            "a\0",
            "a\0\0",
            "a\0b",
            "ab",
            "abcdefg",
            "abcdefgh",
            "abcdefgh\0",
            "abcdefghi",
            "abcdefgi",
            "abcdefgh-2",
            "abcdefgh-10",
            "check-inbox",
            "check-inbox-2",
            "check-inbox-10",
            "é",
            "zz",
            "\u{7f}",
        ]
        .iter()
        .map(|text| text.to_string())
        .collect();
        let mut next = 0x2545_f491_u32;
        for _ in 0..300 {
            // A fixed sequence of short texts over a small alphabet, so that most pairs share a prefix.
            next ^= next << 13;
            next ^= next >> 17;
            next ^= next << 5;
            let len = (next % 20) as usize;
            texts.push((0..len).map(|at| ['a', 'b', '\0', '-'][((next >> (at % 16)) & 3) as usize]).collect());
        }
        let shared: Vec<SharedText> = texts.iter().map(|text| SharedText::new(text).expect("short")).collect();
        for (one, one_text) in shared.iter().zip(&texts) {
            for (other, other_text) in shared.iter().zip(&texts) {
                assert_eq!(
                    one.cmp(other),
                    one_text.as_bytes().cmp(other_text.as_bytes()),
                    "{one_text:?} against {other_text:?}"
                );
                assert_eq!(one == other, one_text == other_text, "{one_text:?} against {other_text:?}");
            }
        }
    }

    #[test]
    fn lives_while_any_copy_does_across_threads() {
        let text = SharedText::new("shared-by-threads").expect("short");
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let mine = text.clone();
                std::thread::spawn(move || {
                    let copies: Vec<SharedText> = (0..10_000).map(|_| mine.clone()).collect();
                    copies.iter().all(|copy| copy.as_str() == "shared-by-threads")
                })
            })
            .collect();
        drop(text);
        for worker in workers {
            assert!(worker.join().expect("no panic"), "each copy reads the text after the first was dropped");
        }
    }
}
