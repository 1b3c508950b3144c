//! Key layouts ("shapes") of the objects a walk meets, remembered so that a repeat costs
//! no sorting, no volatile-key lookups and no key escaping.
//!
//! Argument objects repeat their layout: a list of 260 records has one set of keys, and an
//! agent calls the same tool with the same keys step after step. A shape holds the keys of
//! one object in the order the object yields them, and what writing them needs: which keys
//! are kept (not volatile), in sorted order, each already rendered as `"key":`. An object
//! whose keys match a shape key for key (the same code points, in the same order, under the
//! same volatile set) is written from it; values, and the leaving out of `null` values,
//! stay per object.

use std::rc::Rc;

use crate::canon::{self, Text};

/// Objects with more keys than this are not remembered: matching them would cost about as
/// much as sorting them, and they rarely repeat.
pub const MAX_SHAPE_KEYS: usize = 32;

/// How many shapes a cache keeps (the oldest goes first).
const CACHE_SHAPES: usize = 16;

/// What a walk writes an object's keys from.
#[derive(Debug, Default)]
pub struct Shape {
    /// The volatile set the kept keys were chosen under ([`ShapeCache::lookup`]'s `volatile_id`).
    volatile_id: u64,
    /// Per key, in the object's order: its representation and where its code units end
    /// in `units`.
    keys: Vec<(Repr, usize)>,
    units: Vec<u8>,
    /// Per kept key, in output (code point) order: its index in the object's order and
    /// where its `"key":` ends in `rendered`.
    kept: Vec<(usize, usize)>,
    rendered: Vec<u8>,
}

/// Which of [`Text`]'s variants a key's code units are in. CPython stores a `str` in the
/// narrowest of its representations that fits, so two `str`s are equal exactly when both
/// representation and code units are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Repr {
    Latin1,
    Ucs2,
    Ucs4,
    Wtf8,
}

/// A text's representation and its code units as bytes.
fn raw(text: Text<'_>) -> (Repr, &[u8]) {
    fn bytes_of<T>(units: &[T]) -> &[u8] {
        // SAFETY: `u16` and `u32` have no padding and every byte of them is initialised, so
        // their memory read as `u8` (alignment 1) is valid for the same lifetime.
        unsafe {
            std::slice::from_raw_parts(units.as_ptr().cast::<u8>(), std::mem::size_of_val(units))
        }
    }
    match text {
        Text::Latin1(bytes) => (Repr::Latin1, bytes),
        Text::Ucs2(units) => (Repr::Ucs2, bytes_of(units)),
        Text::Ucs4(units) => (Repr::Ucs4, bytes_of(units)),
        Text::Wtf8(bytes) => (Repr::Wtf8, bytes),
    }
}

impl Shape {
    /// The kept keys in output order: each one's index in the object's order and its
    /// `"key":` text.
    pub fn kept(&self) -> impl Iterator<Item = (usize, &[u8])> {
        let mut start = 0;
        self.kept.iter().map(move |&(index, end)| {
            let rendered = &self.rendered[start..end];
            start = end;
            (index, rendered)
        })
    }

    /// True when the object with `count` keys, the `i`th being `key(i)`, has this shape.
    fn matches<'k>(
        &self,
        volatile_id: u64,
        count: usize,
        key: &impl Fn(usize) -> Text<'k>,
    ) -> bool {
        if self.volatile_id != volatile_id || self.keys.len() != count {
            return false;
        }
        let mut start = 0;
        self.keys.iter().enumerate().all(|(i, &(repr, end))| {
            let units = &self.units[start..end];
            start = end;
            let (other_repr, other_units) = raw(key(i));
            repr == other_repr
                && units.len() == other_units.len()
                && canon::cmp_short(units, other_units).is_eq()
        })
    }

    /// Makes this the shape of the object with `count` keys, the `i`th being `key(i)`,
    /// keeping its allocations.
    fn rebuild<'k>(
        &mut self,
        volatile_id: u64,
        count: usize,
        key: &impl Fn(usize) -> Text<'k>,
        is_volatile: &impl Fn(Text<'_>) -> bool,
    ) {
        self.volatile_id = volatile_id;
        self.keys.clear();
        self.units.clear();
        self.kept.clear();
        self.rendered.clear();
        let mut order: Vec<usize> = Vec::with_capacity(count);
        for i in 0..count {
            let text = key(i);
            let (repr, units) = raw(text);
            self.units.extend_from_slice(units);
            self.keys.push((repr, self.units.len()));
            if !is_volatile(text) {
                order.push(i);
            }
        }
        // The keys of one object are distinct, so the order is total.
        order.sort_unstable_by(|&a, &b| key(a).cmp_code_points(key(b)));
        for i in order {
            canon::write_str(&mut self.rendered, key(i));
            self.rendered.push(b':');
            self.kept.push((i, self.rendered.len()));
        }
    }
}

/// The shapes met lately, by one thread.
#[derive(Default)]
pub struct ShapeCache {
    shapes: Vec<Rc<Shape>>,
    /// Where the next new shape goes once the cache is full.
    next: usize,
}

impl ShapeCache {
    /// The shape of the object with `count` keys, the `i`th being `key(i)`, under the
    /// volatile set numbered `volatile_id` that `is_volatile` tests: remembered, or built
    /// (and remembered when the object is small enough to repeat cheaply).
    pub fn lookup<'k>(
        &mut self,
        volatile_id: u64,
        count: usize,
        key: impl Fn(usize) -> Text<'k>,
        is_volatile: impl Fn(Text<'_>) -> bool,
    ) -> Rc<Shape> {
        if let Some(shape) = self
            .shapes
            .iter()
            .find(|s| s.matches(volatile_id, count, &key))
        {
            return Rc::clone(shape);
        }
        if count > MAX_SHAPE_KEYS {
            let mut shape = Shape::default();
            shape.rebuild(volatile_id, count, &key, &is_volatile);
            return Rc::new(shape);
        }
        let slot = if self.shapes.len() < CACHE_SHAPES {
            self.shapes.push(Rc::default());
            self.shapes.len() - 1
        } else {
            let slot = self.next;
            self.next = (slot + 1) % CACHE_SHAPES;
            slot
        };
        let entry = &mut self.shapes[slot];
        // The evicted shape's allocations are reused unless a walk still writes from it.
        if Rc::get_mut(entry).is_none() {
            *entry = Rc::default();
        }
        if let Some(shape) = Rc::get_mut(entry) {
            shape.rebuild(volatile_id, count, &key, &is_volatile);
        }
        Rc::clone(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(shape: &Shape) -> Vec<(usize, String)> {
        shape
            .kept()
            .map(|(i, r)| (i, String::from_utf8(r.to_vec()).unwrap()))
            .collect()
    }

    fn lookup(cache: &mut ShapeCache, id: u64, keys: &[Text<'_>]) -> Rc<Shape> {
        cache.lookup(id, keys.len(), |i| keys[i], |t| t.equals_str("request_id"))
    }

    #[test]
    fn keys_sorted_rendered_and_volatile_ones_left_out() {
        let mut cache = ShapeCache::default();
        let keys = [
            Text::Latin1(b"since"),
            Text::Latin1(b"request_id"),
            Text::Ucs2(&[0x6771, 0x4eac]),
            Text::Latin1(b"level"),
        ];
        let shape = lookup(&mut cache, 1, &keys);
        assert_eq!(
            kept(&shape),
            [
                (3, r#""level":"#.to_string()),
                (0, r#""since":"#.to_string()),
                (2, r#""\u6771\u4eac":"#.to_string()),
            ]
        );
        assert!(Rc::ptr_eq(&shape, &lookup(&mut cache, 1, &keys)));
    }

    #[test]
    fn a_shape_is_reused_only_for_the_same_keys_order_and_volatile_set() {
        let mut cache = ShapeCache::default();
        let ab = [Text::Latin1(b"a"), Text::Latin1(b"b")];
        let first = lookup(&mut cache, 1, &ab);
        let others: [&[Text<'_>]; 4] = [
            &[Text::Latin1(b"b"), Text::Latin1(b"a")],
            &[Text::Latin1(b"a"), Text::Latin1(b"c")],
            &[Text::Latin1(b"a")],
            // The same code points in another representation never come from CPython, but
            // must not match either way.
            &[Text::Latin1(b"a"), Text::Wtf8(b"b")],
        ];
        for keys in others {
            assert!(!Rc::ptr_eq(&first, &lookup(&mut cache, 1, keys)));
        }
        assert!(!Rc::ptr_eq(&first, &lookup(&mut cache, 2, &ab)));
        assert!(Rc::ptr_eq(&first, &lookup(&mut cache, 1, &ab)));
    }

    #[test]
    fn old_shapes_are_evicted_and_big_objects_not_kept() {
        let mut cache = ShapeCache::default();
        let names: Vec<String> = (0..=CACHE_SHAPES).map(|i| format!("k{i}")).collect();
        let first = lookup(&mut cache, 1, &[Text::Latin1(names[0].as_bytes())]);
        for name in &names[1..] {
            lookup(&mut cache, 1, &[Text::Latin1(name.as_bytes())]);
        }
        assert_eq!(cache.shapes.len(), CACHE_SHAPES);
        // Still held by `first`, so the slot got a fresh shape rather than changing it.
        assert_eq!(kept(&first), [(0, r#""k0":"#.to_string())]);
        let big: Vec<String> = (0..=MAX_SHAPE_KEYS).map(|i| format!("k{i:02}")).collect();
        let big: Vec<Text<'_>> = big.iter().map(|n| Text::Latin1(n.as_bytes())).collect();
        let shape = lookup(&mut cache, 1, &big);
        assert_eq!(shape.kept().count(), MAX_SHAPE_KEYS + 1);
        assert!(!Rc::ptr_eq(&shape, &lookup(&mut cache, 1, &big)));
    }
}
