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
//!
//! Comparing keys code unit by code unit is most of a lookup's cost, and most objects that
//! share a layout share the very key objects too (CPython interns the keys written in
//! source; `json.loads` reuses each key string within a document). So a shape also holds
//! on to the key objects it was last matched with: an object whose keys are those same
//! objects, by address, has the shape without a byte compared. Holding them is what makes
//! the address proof: no other object can be given an address while it is in use.

use std::rc::Rc;

use crate::canon::{self, Text};

/// Objects with more keys than this are not remembered: matching them would cost about as
/// much as sorting them, and they rarely repeat.
pub const MAX_SHAPE_KEYS: usize = 32;

/// How many shapes a cache keeps (the oldest goes first).
const CACHE_SHAPES: usize = 16;

/// A key object held by a shape, which keeps it alive (see the module documentation).
pub trait KeyHandle {
    /// Where the object lives, unique among live objects.
    fn address(&self) -> usize;
}

/// What a walk writes an object's keys from.
#[derive(Debug)]
pub struct Shape<H> {
    /// The volatile set the kept keys were chosen under ([`ShapeCache::lookup`]'s `volatile_id`).
    volatile_id: u64,
    /// The key objects, in the object's order, of an object that had this shape lately.
    handles: Vec<H>,
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

impl<H> Default for Shape<H> {
    fn default() -> Self {
        Shape {
            volatile_id: 0,
            handles: Vec::new(),
            keys: Vec::new(),
            units: Vec::new(),
            kept: Vec::new(),
            rendered: Vec::new(),
        }
    }
}

impl<H: KeyHandle> Shape<H> {
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

    /// True when the object with `count` keys, the `i`th at `address(i)`, has this shape
    /// because its keys are the very objects this shape holds.
    fn holds(&self, volatile_id: u64, count: usize, address: &impl Fn(usize) -> usize) -> bool {
        self.volatile_id == volatile_id
            && self.handles.len() == count
            && self
                .handles
                .iter()
                .enumerate()
                .all(|(i, handle)| handle.address() == address(i))
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
            repr == other_repr && canon::same_short(units, other_units)
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
        self.handles.clear();
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
pub struct ShapeCache<H> {
    shapes: Vec<Rc<Shape<H>>>,
    /// Where the next new shape goes once the cache is full.
    next: usize,
}

impl<H> Default for ShapeCache<H> {
    fn default() -> Self {
        ShapeCache {
            shapes: Vec::new(),
            next: 0,
        }
    }
}

impl<H: KeyHandle> ShapeCache<H> {
    /// The remembered shape of the object with `count` keys, the `i`th at `address(i)`,
    /// under the volatile set numbered `volatile_id`, found by its key objects alone.
    pub fn find_by_address(
        &self,
        volatile_id: u64,
        count: usize,
        address: impl Fn(usize) -> usize,
    ) -> Option<Rc<Shape<H>>> {
        self.shapes
            .iter()
            .find(|s| s.holds(volatile_id, count, &address))
            .map(Rc::clone)
    }

    /// The shape of the object with `count` keys, the `i`th being `key(i)` and held by
    /// `handle(i)`, under the volatile set numbered `volatile_id` that `is_volatile` tests:
    /// remembered (and from now on found by these key objects), or built (and remembered
    /// when the object is small enough to repeat cheaply).
    pub fn lookup<'k>(
        &mut self,
        volatile_id: u64,
        count: usize,
        key: impl Fn(usize) -> Text<'k>,
        handle: impl Fn(usize) -> H,
        is_volatile: impl Fn(Text<'_>) -> bool,
    ) -> Rc<Shape<H>> {
        if let Some(entry) = self
            .shapes
            .iter_mut()
            .find(|s| s.matches(volatile_id, count, &key))
        {
            // Unless a walk is writing from it right now (an object nested in one of the
            // same layout), the shape moves on to these key objects.
            if let Some(shape) = Rc::get_mut(entry) {
                shape.handles.clear();
                shape.handles.extend((0..count).map(&handle));
            }
            return Rc::clone(entry);
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
            shape.handles.extend((0..count).map(&handle));
        }
        Rc::clone(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Key objects in the tests: shared byte strings, told apart by address.
    type Held = Rc<[u8]>;

    impl KeyHandle for Held {
        fn address(&self) -> usize {
            self.as_ptr() as usize
        }
    }

    fn kept(shape: &Shape<Held>) -> Vec<(usize, String)> {
        shape
            .kept()
            .map(|(i, r)| (i, String::from_utf8(r.to_vec()).unwrap()))
            .collect()
    }

    /// A lookup of keys that are fresh objects each time, so only their bytes can match.
    fn lookup(cache: &mut ShapeCache<Held>, id: u64, keys: &[Text<'_>]) -> Rc<Shape<Held>> {
        let fresh = |i: usize| Held::from(format!("{:?}", keys[i]).into_bytes());
        cache.lookup(
            id,
            keys.len(),
            |i| keys[i],
            fresh,
            |t| t.equals_str("request_id"),
        )
    }

    fn lookup_held(cache: &mut ShapeCache<Held>, keys: &[Held]) -> Rc<Shape<Held>> {
        let text = |i: usize| Text::Latin1(&keys[i]);
        cache.lookup(1, keys.len(), text, |i| Rc::clone(&keys[i]), |_| false)
    }

    fn find_held(cache: &ShapeCache<Held>, keys: &[Held]) -> Option<Rc<Shape<Held>>> {
        cache.find_by_address(1, keys.len(), |i| keys[i].address())
    }

    #[test]
    fn a_shape_is_found_by_the_key_objects_it_last_matched() {
        let mut cache = ShapeCache::default();
        let first: Vec<Held> = vec![Held::from(&b"a"[..]), Held::from(&b"b"[..])];
        let second: Vec<Held> = first.iter().map(|k| Held::from(&k[..])).collect();
        assert!(find_held(&cache, &first).is_none());
        let shape = lookup_held(&mut cache, &first);
        assert!(Rc::ptr_eq(&shape, &find_held(&cache, &first).unwrap()));
        // Equal keys in other objects: found by their bytes, and from then on by address.
        assert!(find_held(&cache, &second).is_none());
        drop(shape);
        let shape = lookup_held(&mut cache, &second);
        assert!(Rc::ptr_eq(&shape, &find_held(&cache, &second).unwrap()));
        assert!(find_held(&cache, &first).is_none());
        assert_eq!(
            Rc::strong_count(&first[0]),
            1,
            "the old key objects are let go"
        );
        // A shape in use (by an object of the same layout around this one) keeps its keys.
        let third: Vec<Held> = first.iter().map(|k| Held::from(&k[..])).collect();
        assert!(Rc::ptr_eq(&shape, &lookup_held(&mut cache, &third)));
        assert!(find_held(&cache, &second).is_some());
        assert_eq!(
            kept(&shape),
            [(0, r#""a":"#.to_string()), (1, r#""b":"#.to_string())]
        );
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
