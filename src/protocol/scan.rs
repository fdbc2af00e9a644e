//! Step 2, identify: where a body's list items are.
//!
//! One pass of serde_json over a JSON object: every field parsed but the
//! list's, whose items are only found (as spans of the body) and left for
//! whoever needs them as values. A large re-sent body takes the spans it
//! shares with an earlier one from [`super::resent`] instead.

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::fmt;
use std::ops::Range;

/// The fields of the object `text` (the one under `list` as null) and the
/// spans of the array's items under `list`, `None` if absent. Repeated
/// keys keep their first place and last value, as serde_json's map does.
/// `None` when `text` is not a JSON object.
pub(crate) fn split_whole(text: &[u8], list: &str) -> Option<(Map<String, Value>, Option<Spans>)> {
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    let (body, items) = Fields { list }.deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    let base = text.as_ptr() as usize;
    let spans = items.map(|items| {
        items
            .iter()
            .map(|item| {
                let start = item.get().as_ptr() as usize - base;
                start..start + item.get().len()
            })
            .collect()
    });
    Some((body, spans))
}

pub(crate) type Spans = Vec<Range<usize>>;

type Split<'de> = (Map<String, Value>, Option<Vec<&'de RawValue>>);

struct Fields<'l> {
    list: &'l str,
}

impl<'de> DeserializeSeed<'de> for Fields<'_> {
    type Value = Split<'de>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Split<'de>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Fields<'_> {
    type Value = Split<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Split<'de>, A::Error> {
        let mut body = Map::new();
        let mut items = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.list {
                items = map.next_value::<Items<'de>>()?.0;
                body.insert(key, Value::Null);
            } else {
                let value = map.next_value::<Value>()?;
                body.insert(key, value);
            }
        }
        Ok((body, items))
    }
}

/// The items of an array; `None` for any other value, which is not an
/// error: a repeated key may still give the list (the last one counts).
struct Items<'de>(Option<Vec<&'de RawValue>>);

impl<'de> Deserialize<'de> for Items<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ItemsVisitor)
    }
}

struct ItemsVisitor;

impl<'de> Visitor<'de> for ItemsVisitor {
    type Value = Items<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(16));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Items(Some(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Items<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Items(None))
    }

    fn visit_unit<E>(self) -> Result<Items<'de>, E> {
        Ok(Items(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Items<'de>, E> {
        Ok(Items(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Items<'de>, E> {
        Ok(Items(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Items<'de>, E> {
        Ok(Items(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Items<'de>, E> {
        Ok(Items(None))
    }

    fn visit_str<E>(self, _: &str) -> Result<Items<'de>, E> {
        Ok(Items(None))
    }
}
