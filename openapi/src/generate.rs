//! A value made from a schema: seeded, so the same seed gives the same value, and bounded, so a
//! recursive schema ends.
//!
//! The generator reads the document's schemas in place (by pointer) and, at each node, first
//! folds the node into one set of constraints (`Merged`): `$ref` followed (its siblings ignored in
//! 3.0, kept in 3.1), every `allOf` member added, one branch of each `oneOf`/`anyOf` chosen and
//! added, bounds tightened, types intersected. A value is then drawn from the merged constraints.
//! The merge is the usual approximation (two `pattern`s, a `not`, a `oneOf` whose branches overlap
//! are not solved): it is why every value leaves this crate only after the validator accepted it,
//! and why the request builder tries again with other seeds and strategies (see `Strategy`) before
//! it gives up with the validator's reason.
//!
//! Values are meant to be accepted by a real API, not to hunt for its edges: small readable
//! numbers and strings, `null` only where nothing else is allowed, optional properties only near
//! the top, `readOnly` properties never.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::ChaCha8Rng;
use rand::RngExt;
use serde_json::{Map, Number, Value};

use crate::load::Version;
use crate::pointer::{self, RefTarget};

/// Nesting past which only required properties and the fewest array items are made.
pub const SOFT_DEPTH: usize = 4;
/// Nesting past which a schema is judged recursive without an end.
pub const MAX_DEPTH: usize = 32;
/// Longest string made (a `minLength` above it is refused).
pub const MAX_STRING: u64 = 65_536;
/// Most array items made (a `minItems` above it is refused).
pub const MAX_ITEMS: u64 = 1_024;
/// Most repetitions of an unbounded regex quantifier (`*`, `+`, `{n,}`).
const MAX_REPEAT: u32 = 8;

/// Which optional properties a generated object gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Optional {
    /// All of them at the top two levels, none deeper.
    Shallow,
    /// None.
    None,
    /// Each with probability one half, at the top two levels.
    Random,
}

/// How one attempt generates: whether the schemas' own examples and defaults are used, and which
/// optional properties objects get.
#[derive(Debug, Clone, Copy)]
pub struct Strategy {
    /// Use `example`/`examples`/`default` of a schema where it has one.
    pub examples: bool,
    /// Which optional properties to include.
    pub optional: Optional,
}

/// The strategies tried in order, one per attempt (the last repeats with new seeds).
pub fn strategy(attempt: usize) -> Strategy {
    match attempt {
        0 => Strategy {
            examples: true,
            optional: Optional::Shallow,
        },
        1 => Strategy {
            examples: true,
            optional: Optional::None,
        },
        2 => Strategy {
            examples: false,
            optional: Optional::Shallow,
        },
        3 => Strategy {
            examples: false,
            optional: Optional::None,
        },
        _ => Strategy {
            examples: false,
            optional: Optional::Random,
        },
    }
}

/// The kind of value wanted when a schema says nothing about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// An object (a request body).
    Object,
    /// A string (a parameter).
    String,
}

/// Generates values from the schemas of one document.
pub struct Generator<'a> {
    doc: &'a Value,
    version: Version,
    rng: ChaCha8Rng,
    strategy: Strategy,
}

/// All constraints of one node, merged.
#[derive(Default, Debug)]
struct Merged {
    /// Allowed types; None when any type is.
    types: Option<BTreeSet<&'static str>>,
    enumeration: Option<Vec<Value>>,
    constant: Option<Value>,
    example: Option<Value>,
    minimum: Option<(f64, bool)>,
    maximum: Option<(f64, bool)>,
    multiple_of: Option<f64>,
    min_length: u64,
    max_length: Option<u64>,
    patterns: Vec<String>,
    format: Option<String>,
    items: Vec<String>,
    prefix_items: Vec<Vec<String>>,
    contains: Vec<String>,
    min_items: u64,
    max_items: Option<u64>,
    unique_items: bool,
    properties: BTreeMap<String, Vec<String>>,
    read_only: BTreeSet<String>,
    required: BTreeSet<String>,
    /// Schemas of properties not named in `properties`; `None` entry: forbidden.
    additional: Vec<Option<String>>,
    pattern_properties: Vec<(String, String)>,
    property_names: Vec<String>,
    min_properties: u64,
    max_properties: Option<u64>,
    dependent_required: BTreeMap<String, Vec<String>>,
    discriminator: Option<(String, String)>,
}

const ALL_TYPES: [&str; 7] = [
    "null", "boolean", "object", "array", "number", "string", "integer",
];

fn type_name(t: &str) -> Option<&'static str> {
    ALL_TYPES.iter().copied().find(|x| *x == t)
}

impl<'a> Generator<'a> {
    /// A generator over `doc` (the normalized tree) drawing from `rng`.
    pub fn new(doc: &'a Value, version: Version, rng: ChaCha8Rng, strategy: Strategy) -> Self {
        Generator {
            doc,
            version,
            rng,
            strategy,
        }
    }

    /// A value for the schema at `schema` (a pointer), or why none could be made.
    pub fn value(&mut self, schema: &str, fallback: Fallback) -> Result<Value, String> {
        self.generate(&[schema.to_string()], 0, fallback)
    }

    /// A value for every schema of `schemas` at once (their conjunction).
    fn generate(
        &mut self,
        schemas: &[String],
        depth: usize,
        fallback: Fallback,
    ) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "`{}` needs values nested deeper than {MAX_DEPTH} levels: a recursive schema \
                 without a way to end",
                schemas.first().map(String::as_str).unwrap_or("")
            ));
        }
        let mut merged = Merged::default();
        for s in schemas {
            self.absorb(&mut merged, s, depth, &mut Vec::new())?;
        }
        self.produce(merged, schemas, depth, fallback)
    }

    fn node(&self, at: &str) -> Result<&'a Value, String> {
        self.doc
            .pointer(at)
            .ok_or_else(|| format!("no schema at `{at}`"))
    }

    /// Folds the schema at `at` into `m`. `chain` holds the `$ref`s followed since the last
    /// structural step, to tell a reference cycle from recursion.
    fn absorb(
        &mut self,
        m: &mut Merged,
        at: &str,
        depth: usize,
        chain: &mut Vec<String>,
    ) -> Result<(), String> {
        let node = self.node(at)?;
        let map = match node {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return Err(format!("the schema at `{at}` admits no value")),
            Value::Object(map) => map,
            _ => return Err(format!("`{at}` is not a schema")),
        };
        if self.strategy.examples && m.example.is_none() {
            m.example = map
                .get("example")
                .or_else(|| match map.get("examples") {
                    Some(Value::Array(xs)) => xs.first(),
                    _ => None,
                })
                .or_else(|| map.get("default"))
                .cloned();
        }
        if let Some(r) = map.get("$ref").and_then(Value::as_str) {
            let RefTarget::Internal(target) = pointer::parse_ref(r) else {
                return Err(format!(
                    "`{at}`: `$ref: {r}` is not a reference into the document"
                ));
            };
            if chain.contains(&target) || chain.len() > 64 {
                return Err(format!(
                    "`{at}`: circular `$ref` with nothing between: {} → {target}",
                    chain.join(" → ")
                ));
            }
            chain.push(target.clone());
            self.absorb(m, &target, depth, chain)?;
            chain.pop();
            if self.version == Version::V3_0 {
                // 3.0: "any properties added SHALL be ignored" beside a `$ref`.
                return Ok(());
            }
        }
        if let Some(t) = map.get("type") {
            let mut set = BTreeSet::new();
            match t {
                Value::String(s) => set.extend(type_name(s)),
                Value::Array(ts) => {
                    set.extend(ts.iter().filter_map(Value::as_str).filter_map(type_name))
                }
                _ => {}
            }
            // "integer" is a "number".
            if set.contains("number") {
                set.insert("integer");
            }
            m.types = Some(match m.types.take() {
                None => set,
                Some(old) => {
                    let mut both: BTreeSet<&'static str> =
                        old.intersection(&set).copied().collect();
                    if old.contains("integer") && set.contains("number") {
                        both.insert("integer");
                    }
                    if set.contains("integer") && old.contains("number") {
                        both.insert("integer");
                    }
                    both
                }
            });
        }
        if let Some(Value::Array(values)) = map.get("enum") {
            m.enumeration = Some(match m.enumeration.take() {
                None => values.clone(),
                Some(old) => old.into_iter().filter(|v| values.contains(v)).collect(),
            });
        }
        if let Some(c) = map.get("const") {
            m.constant = Some(c.clone());
        }
        self.numbers(m, map);
        if let Some(n) = map.get("minLength").and_then(Value::as_u64) {
            m.min_length = m.min_length.max(n);
        }
        if let Some(n) = map.get("maxLength").and_then(Value::as_u64) {
            m.max_length = Some(m.max_length.map_or(n, |o| o.min(n)));
        }
        if let Some(p) = map.get("pattern").and_then(Value::as_str) {
            m.patterns.push(p.to_string());
        }
        if let Some(f) = map.get("format").and_then(Value::as_str) {
            m.format.get_or_insert_with(|| f.to_string());
        }
        self.arrays(m, map, at);
        self.objects(m, map, at);
        for key in ["allOf", "anyOf", "oneOf"] {
            let Some(Value::Array(list)) = map.get(key) else {
                continue;
            };
            let at_key = pointer::push(at, key);
            if key == "allOf" {
                for i in 0..list.len() {
                    self.absorb(m, &pointer::push(&at_key, &i.to_string()), depth, chain)?;
                }
                continue;
            }
            if list.is_empty() {
                continue;
            }
            let i = self.choose_branch(list, depth);
            let branch = pointer::push(&at_key, &i.to_string());
            if let Some(d) = map.get("discriminator") {
                if let Some(value) = self.discriminator_value(d, &list[i]) {
                    if let Some(name) = d.get("propertyName").and_then(Value::as_str) {
                        m.discriminator = Some((name.to_string(), value));
                    }
                }
            }
            self.absorb(m, &branch, depth, chain)?;
        }
        if map.contains_key("if") && map.contains_key("then") {
            self.absorb(m, &pointer::push(at, "if"), depth, chain)?;
            self.absorb(m, &pointer::push(at, "then"), depth, chain)?;
        }
        Ok(())
    }

    fn numbers(&mut self, m: &mut Merged, map: &Map<String, Value>) {
        let draft4 = self.version == Version::V3_0;
        let tighter_low = |old: Option<(f64, bool)>, new: (f64, bool)| match old {
            Some(o) if o.0 > new.0 || (o.0 == new.0 && o.1) => Some(o),
            _ => Some(new),
        };
        let tighter_high = |old: Option<(f64, bool)>, new: (f64, bool)| match old {
            Some(o) if o.0 < new.0 || (o.0 == new.0 && o.1) => Some(o),
            _ => Some(new),
        };
        if let Some(x) = map.get("minimum").and_then(Value::as_f64) {
            let exclusive = draft4 && map.get("exclusiveMinimum") == Some(&Value::Bool(true));
            m.minimum = tighter_low(m.minimum, (x, exclusive));
        }
        if let Some(x) = map.get("maximum").and_then(Value::as_f64) {
            let exclusive = draft4 && map.get("exclusiveMaximum") == Some(&Value::Bool(true));
            m.maximum = tighter_high(m.maximum, (x, exclusive));
        }
        if let Some(x) = map.get("exclusiveMinimum").and_then(Value::as_f64) {
            m.minimum = tighter_low(m.minimum, (x, true));
        }
        if let Some(x) = map.get("exclusiveMaximum").and_then(Value::as_f64) {
            m.maximum = tighter_high(m.maximum, (x, true));
        }
        if let Some(x) = map.get("multipleOf").and_then(Value::as_f64) {
            if x > 0.0 {
                m.multiple_of = Some(match m.multiple_of {
                    // Two steps: their product is a multiple of both when both are integers,
                    // the common case; the validator judges the rest.
                    Some(o) if (o / x).fract() == 0.0 => o,
                    Some(o) if (x / o).fract() == 0.0 => x,
                    Some(o) => o * x,
                    None => x,
                });
            }
        }
    }

    fn arrays(&mut self, m: &mut Merged, map: &Map<String, Value>, at: &str) {
        match map.get("items") {
            Some(Value::Array(list)) => {
                // Draft 4 tuple form.
                m.prefix_items.extend(
                    (0..list.len())
                        .map(|i| vec![pointer::push(&pointer::push(at, "items"), &i.to_string())]),
                );
            }
            Some(_) => m.items.push(pointer::push(at, "items")),
            None => {}
        }
        if let Some(Value::Array(list)) = map.get("prefixItems") {
            for i in 0..list.len() {
                let p = pointer::push(&pointer::push(at, "prefixItems"), &i.to_string());
                match m.prefix_items.get_mut(i) {
                    Some(slot) => slot.push(p),
                    None => m.prefix_items.push(vec![p]),
                }
            }
        }
        if map.contains_key("contains") {
            m.contains.push(pointer::push(at, "contains"));
        }
        if let Some(n) = map.get("minItems").and_then(Value::as_u64) {
            m.min_items = m.min_items.max(n);
        }
        if let Some(n) = map.get("maxItems").and_then(Value::as_u64) {
            m.max_items = Some(m.max_items.map_or(n, |o| o.min(n)));
        }
        if map.get("uniqueItems") == Some(&Value::Bool(true)) {
            m.unique_items = true;
        }
    }

    fn objects(&mut self, m: &mut Merged, map: &Map<String, Value>, at: &str) {
        if let Some(Value::Object(props)) = map.get("properties") {
            let base = pointer::push(at, "properties");
            for (name, schema) in props {
                if schema.get("readOnly") == Some(&Value::Bool(true)) {
                    m.read_only.insert(name.clone());
                }
                m.properties
                    .entry(name.clone())
                    .or_default()
                    .push(pointer::push(&base, name));
            }
        }
        if let Some(Value::Array(req)) = map.get("required") {
            m.required
                .extend(req.iter().filter_map(Value::as_str).map(str::to_string));
        }
        match map.get("additionalProperties") {
            Some(Value::Bool(false)) => m.additional.push(None),
            Some(Value::Object(_)) => m
                .additional
                .push(Some(pointer::push(at, "additionalProperties"))),
            _ => {}
        }
        if let Some(Value::Object(pp)) = map.get("patternProperties") {
            let base = pointer::push(at, "patternProperties");
            for pattern in pp.keys() {
                m.pattern_properties
                    .push((pattern.clone(), pointer::push(&base, pattern)));
            }
        }
        if map.contains_key("propertyNames") {
            m.property_names.push(pointer::push(at, "propertyNames"));
        }
        if let Some(n) = map.get("minProperties").and_then(Value::as_u64) {
            m.min_properties = m.min_properties.max(n);
        }
        if let Some(n) = map.get("maxProperties").and_then(Value::as_u64) {
            m.max_properties = Some(m.max_properties.map_or(n, |o| o.min(n)));
        }
        for key in ["dependentRequired", "dependencies"] {
            if let Some(Value::Object(deps)) = map.get(key) {
                for (name, list) in deps {
                    if let Value::Array(list) = list {
                        m.dependent_required
                            .entry(name.clone())
                            .or_default()
                            .extend(list.iter().filter_map(Value::as_str).map(str::to_string));
                    }
                }
            }
        }
    }

    /// A branch of a `oneOf`/`anyOf`: at random, but never a bare `null` branch when another
    /// exists, and, deep in a recursive structure, a branch that is not an object or array when
    /// there is one.
    fn choose_branch(&mut self, list: &[Value], depth: usize) -> usize {
        let resolved: Vec<&Value> = list.iter().map(|b| self.follow(b).unwrap_or(b)).collect();
        let is_null = |b: &Value| b.get("type").and_then(Value::as_str) == Some("null");
        let is_leaf = |b: &Value| {
            matches!(
                b.get("type").and_then(Value::as_str),
                Some("string" | "integer" | "number" | "boolean")
            ) || b.get("enum").is_some()
        };
        let mut candidates: Vec<usize> =
            (0..list.len()).filter(|i| !is_null(resolved[*i])).collect();
        if candidates.is_empty() {
            candidates = (0..list.len()).collect();
        }
        if depth >= SOFT_DEPTH {
            let leaves: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|i| is_leaf(resolved[*i]))
                .collect();
            if !leaves.is_empty() {
                candidates = leaves;
            }
        }
        candidates[self.rng.random_range(0..candidates.len())]
    }

    /// `node` with its `$ref` chain followed (for a look at a branch's type, not for generation).
    fn follow(&self, node: &'a Value) -> Option<&'a Value> {
        let mut node = node;
        for _ in 0..16 {
            match node
                .get("$ref")
                .and_then(Value::as_str)
                .map(pointer::parse_ref)
            {
                Some(RefTarget::Internal(p)) => node = self.doc.pointer(&p)?,
                _ => return Some(node),
            }
        }
        None
    }

    /// The discriminator value naming `branch`: the mapping key whose target is the branch's
    /// `$ref`, else the referenced schema's name.
    fn discriminator_value(&self, d: &Value, branch: &Value) -> Option<String> {
        let r = branch.get("$ref").and_then(Value::as_str)?;
        if let Some(Value::Object(mapping)) = d.get("mapping") {
            for (key, target) in mapping {
                let t = target.as_str().unwrap_or("");
                if t == r || r.rsplit('/').next() == Some(t) {
                    return Some(key.clone());
                }
            }
        }
        r.rsplit('/')
            .next()
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
    }

    fn produce(
        &mut self,
        m: Merged,
        at: &[String],
        depth: usize,
        fallback: Fallback,
    ) -> Result<Value, String> {
        let here = at.first().map(String::as_str).unwrap_or("");
        if let Some(c) = m.constant {
            return Ok(c);
        }
        if let Some(values) = &m.enumeration {
            let allowed: Vec<&Value> = values
                .iter()
                .filter(|v| m.types.as_ref().is_none_or(|t| t.contains(json_type(v))))
                .collect();
            let non_null: Vec<&Value> = allowed.iter().copied().filter(|v| !v.is_null()).collect();
            let pool = if non_null.is_empty() {
                &allowed
            } else {
                &non_null
            };
            if pool.is_empty() {
                return Err(format!(
                    "`{here}`: no value of its `enum` has an allowed type"
                ));
            }
            return Ok(pool[self.rng.random_range(0..pool.len())].clone());
        }
        if let Some(e) = m.example.clone() {
            if m.types.as_ref().is_none_or(|t| t.contains(json_type(&e))) {
                return Ok(e);
            }
        }
        let kind = self.kind(&m, fallback, here)?;
        match kind {
            "null" => Ok(Value::Null),
            "boolean" => Ok(Value::Bool(self.rng.random_bool(0.5))),
            "integer" => self.integer(&m, here),
            "number" => self.number(&m, here),
            "string" => self.string(&m, here),
            "array" => self.array(m, depth, here),
            _ => self.object(m, depth, here),
        }
    }

    /// The JSON type to make.
    fn kind(&mut self, m: &Merged, fallback: Fallback, here: &str) -> Result<&'static str, String> {
        if let Some(types) = &m.types {
            if types.is_empty() {
                return Err(format!("`{here}`: its `type`s exclude each other"));
            }
            let non_null: Vec<&'static str> =
                types.iter().copied().filter(|t| *t != "null").collect();
            if non_null.is_empty() {
                return Ok("null");
            }
            // "number" admits the integers too (an "integer" is added beside every "number" for
            // the intersections); only a lone "integer" asks for one.
            let non_null: Vec<&'static str> = if non_null.contains(&"number") {
                non_null.into_iter().filter(|t| *t != "integer").collect()
            } else {
                non_null
            };
            if non_null == ["integer"] {
                return Ok("integer");
            }
            // With several, prefer the one the other keywords speak of.
            let hinted = self.hinted(m);
            if let Some(h) = hinted.filter(|h| non_null.contains(h)) {
                return Ok(h);
            }
            return Ok(non_null[self.rng.random_range(0..non_null.len())]);
        }
        Ok(self.hinted(m).unwrap_or(match fallback {
            Fallback::Object => "object",
            Fallback::String => "string",
        }))
    }

    fn hinted(&self, m: &Merged) -> Option<&'static str> {
        if !m.properties.is_empty()
            || !m.required.is_empty()
            || !m.additional.is_empty()
            || m.min_properties > 0
        {
            Some("object")
        } else if !m.items.is_empty() || !m.prefix_items.is_empty() || m.min_items > 0 {
            Some("array")
        } else if m.min_length > 0 || m.max_length.is_some() || !m.patterns.is_empty() {
            Some("string")
        } else if m.minimum.is_some() || m.maximum.is_some() || m.multiple_of.is_some() {
            Some("number")
        } else if m.format.is_some() {
            Some("string")
        } else {
            None
        }
    }

    fn integer(&mut self, m: &Merged, here: &str) -> Result<Value, String> {
        let lo = m.minimum.map(|(x, ex)| {
            let c = x.ceil();
            if ex && c == x {
                c + 1.0
            } else {
                c
            }
        });
        let hi = m.maximum.map(|(x, ex)| {
            let f = x.floor();
            if ex && f == x {
                f - 1.0
            } else {
                f
            }
        });
        let (lo, hi) = range(lo, hi, 1.0, 100.0);
        let (lo, hi) = (
            lo.max(i64::MIN as f64) as i128,
            hi.min(i64::MAX as f64) as i128,
        );
        if lo > hi {
            return Err(format!("`{here}`: no integer lies between its bounds"));
        }
        let step = match m.multiple_of {
            Some(s) if s.fract() == 0.0 && s >= 1.0 => s as i128,
            Some(s) => {
                // A fractional step: an integer multiple of it is a multiple of its denominator.
                let n = (1.0 / s).round();
                if (n * s - 1.0).abs() < 1e-9 {
                    1
                } else {
                    return Err(format!(
                        "`{here}`: integers that are multiples of {s} are not made"
                    ));
                }
            }
            None => 1,
        };
        let first = lo.div_euclid(step) + i128::from(lo.rem_euclid(step) != 0);
        let last = hi.div_euclid(step);
        if first > last {
            return Err(format!(
                "`{here}`: no multiple of {step} lies between its bounds"
            ));
        }
        let span = (last - first).min(1_000_000) as u64;
        let k = first + i128::from(self.rng.random_range(0..=span));
        Ok(Value::Number(Number::from((k * step) as i64)))
    }

    fn number(&mut self, m: &Merged, here: &str) -> Result<Value, String> {
        let lo = m.minimum.map(|(x, _)| x);
        let hi = m.maximum.map(|(x, _)| x);
        let (lo, hi) = range(lo, hi, 1.0, 100.0);
        if let Some(step) = m.multiple_of {
            let first = (lo / step).ceil() as i64;
            let last = (hi / step).floor() as i64;
            let excl_lo = m.minimum.is_some_and(|b| b.1);
            let excl_hi = m.maximum.is_some_and(|b| b.1);
            let first = if excl_lo && first as f64 * step <= lo {
                first + 1
            } else {
                first
            };
            let last = if excl_hi && last as f64 * step >= hi {
                last - 1
            } else {
                last
            };
            if first > last {
                return Err(format!(
                    "`{here}`: no multiple of {step} lies between its bounds"
                ));
            }
            let k = self.rng.random_range(first..=last);
            return Ok(float(round_like(k as f64 * step, step)));
        }
        // Two decimals, inside the bounds (and off an exclusive bound).
        let cents_lo = (lo * 100.0).ceil() as i64 + i64::from(m.minimum.is_some_and(|b| b.1));
        let cents_hi = (hi * 100.0).floor() as i64 - i64::from(m.maximum.is_some_and(|b| b.1));
        if cents_lo > cents_hi {
            let mid = (lo + hi) / 2.0;
            if mid > lo && mid < hi {
                return Ok(float(mid));
            }
            return Err(format!("`{here}`: no number lies between its bounds"));
        }
        let c = self.rng.random_range(cents_lo..=cents_hi);
        Ok(float(c as f64 / 100.0))
    }

    fn string(&mut self, m: &Merged, here: &str) -> Result<Value, String> {
        if m.min_length > MAX_STRING {
            return Err(format!(
                "`{here}`: minLength {} is longer than the {MAX_STRING} characters made here",
                m.min_length
            ));
        }
        let max = m.max_length.unwrap_or(u64::MAX);
        if m.min_length > max {
            return Err(format!(
                "`{here}`: minLength {} > maxLength {max}",
                m.min_length
            ));
        }
        if let Some(pattern) = m.patterns.first() {
            let regex = crate::regex::compile(pattern, MAX_REPEAT)
                .map_err(|e| format!("`{here}`: pattern `{pattern}`: {e}"))?;
            let mut last = String::new();
            for _ in 0..16 {
                let s: String = self.rng.sample(&regex);
                let n = s.chars().count() as u64;
                if n >= m.min_length && n <= max {
                    return Ok(Value::String(s));
                }
                last = s;
            }
            return Ok(Value::String(last));
        }
        if let Some(f) = &m.format {
            if let Some(s) = crate::formats::generate(f, &mut self.rng) {
                let n = s.chars().count() as u64;
                if n >= m.min_length && n <= max {
                    return Ok(Value::String(s));
                }
            }
        }
        let want_hi = max.min(m.min_length.max(4) + 8);
        let want_lo = m.min_length.max(1).min(want_hi);
        let n = self.rng.random_range(want_lo..=want_hi);
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let s: String = (0..n)
            .map(|i| {
                // A letter first: a value that looks like an identifier, not a number.
                let pool = if i == 0 { &ALPHABET[..26] } else { ALPHABET };
                pool[self.rng.random_range(0..pool.len())] as char
            })
            .collect();
        Ok(Value::String(s))
    }

    fn array(&mut self, m: Merged, depth: usize, here: &str) -> Result<Value, String> {
        if m.min_items > MAX_ITEMS {
            return Err(format!(
                "`{here}`: minItems {} is more than the {MAX_ITEMS} items made here",
                m.min_items
            ));
        }
        let max = m.max_items.unwrap_or(u64::MAX);
        if m.min_items > max {
            return Err(format!(
                "`{here}`: minItems {} > maxItems {max}",
                m.min_items
            ));
        }
        let prefix = m.prefix_items.len() as u64;
        let wanted = if depth >= SOFT_DEPTH {
            m.min_items
        } else {
            m.min_items.max(1)
        };
        let n = wanted.max(prefix.min(max)).min(max).max(m.min_items);
        let mut out: Vec<Value> = Vec::with_capacity(n as usize);
        for i in 0..n as usize {
            let mut schemas = match m.prefix_items.get(i) {
                Some(s) => s.clone(),
                None => m.items.clone(),
            };
            if i == 0 {
                schemas.extend(m.contains.iter().cloned());
            }
            let mut value = self.generate(&schemas, depth + 1, Fallback::String)?;
            if m.unique_items {
                let mut tries = 0;
                while out.contains(&value) {
                    tries += 1;
                    if tries > 16 {
                        return Err(format!(
                            "`{here}`: {n} distinct items are needed (uniqueItems) and could not \
                             be made"
                        ));
                    }
                    value = self.generate(&schemas, depth + 1, Fallback::String)?;
                }
            }
            out.push(value);
        }
        Ok(Value::Array(out))
    }

    fn object(&mut self, m: Merged, depth: usize, here: &str) -> Result<Value, String> {
        let include_optional = |g: &mut Self| match g.strategy.optional {
            Optional::None => false,
            Optional::Shallow => depth < 2,
            Optional::Random => depth < 2 && g.rng.random_bool(0.5),
        };
        let mut names: BTreeSet<String> = m.required.clone();
        for name in m.properties.keys() {
            if !m.read_only.contains(name) && !names.contains(name) && include_optional(self) {
                names.insert(name.clone());
            }
        }
        // Dependencies of what is in.
        let mut grew = true;
        while grew {
            grew = false;
            for (name, deps) in &m.dependent_required {
                if names.contains(name) {
                    for d in deps {
                        grew |= names.insert(d.clone());
                    }
                }
            }
        }
        let mut out = Map::new();
        for name in &names {
            if m.discriminator.as_ref().is_some_and(|(p, _)| p == name) {
                continue;
            }
            let schemas = self.schemas_of(&m, name);
            let v = self.generate(&schemas, depth + 1, Fallback::String)?;
            out.insert(name.clone(), v);
        }
        if let Some((p, v)) = &m.discriminator {
            out.insert(p.clone(), Value::String(v.clone()));
        }
        // A map (no named properties) gets an entry near the top; `minProperties` is met anyway.
        let open = !m.additional.iter().any(Option::is_none);
        let mut extra = m.min_properties.saturating_sub(out.len() as u64);
        if extra == 0
            && m.properties.is_empty()
            && depth < 2
            && open
            && (m.additional.iter().any(Option::is_some) || !m.pattern_properties.is_empty())
        {
            extra = 1;
        }
        let mut n = 0;
        while extra > 0 {
            n += 1;
            if n > 64 {
                return Err(format!(
                    "`{here}`: could not make {} properties",
                    m.min_properties
                ));
            }
            let (key, schemas) = if let Some((pattern, schema)) = m.pattern_properties.first() {
                let regex = crate::regex::compile(pattern, MAX_REPEAT)
                    .map_err(|e| format!("`{here}`: pattern property `{pattern}`: {e}"))?;
                (self.rng.sample::<String, _>(&regex), vec![schema.clone()])
            } else if open {
                let key = match m.property_names.first() {
                    Some(p) => {
                        match self.generate(std::slice::from_ref(p), depth + 1, Fallback::String)? {
                            Value::String(s) => s,
                            other => other.to_string(),
                        }
                    }
                    None => format!("key{n}"),
                };
                let schemas = self.schemas_of(&m, &key);
                (key, schemas)
            } else {
                return Err(format!(
                    "`{here}`: minProperties {} needs more properties than it allows",
                    m.min_properties
                ));
            };
            if out.contains_key(&key) {
                continue;
            }
            let v = self.generate(&schemas, depth + 1, Fallback::String)?;
            out.insert(key, v);
            extra -= 1;
        }
        Ok(Value::Object(out))
    }

    /// The schemas a property `name` must satisfy: its `properties` entries, else the matching
    /// `patternProperties`, else `additionalProperties`.
    fn schemas_of(&self, m: &Merged, name: &str) -> Vec<String> {
        if let Some(s) = m.properties.get(name) {
            return s.clone();
        }
        let matching: Vec<String> = m
            .pattern_properties
            .iter()
            .filter(|(p, _)| crate::regex::is_match(p, name))
            .map(|(_, s)| s.clone())
            .collect();
        if !matching.is_empty() {
            return matching;
        }
        m.additional.iter().flatten().cloned().collect()
    }
}

/// A range for a number with defaults where a bound is missing: near `lo_default..hi_default`
/// but inside the given bound.
fn range(lo: Option<f64>, hi: Option<f64>, lo_default: f64, hi_default: f64) -> (f64, f64) {
    match (lo, hi) {
        (Some(l), Some(h)) => (l, h),
        (Some(l), None) => (l, l.max(0.0) + hi_default),
        (None, Some(h)) if h >= lo_default => (lo_default, h.min(hi_default.max(lo_default))),
        (None, Some(h)) => (h - hi_default, h),
        (None, None) => (lo_default, hi_default),
    }
}

/// `x` rounded to as many decimals as `step` has, so `0.1 * 3` is `0.3`.
fn round_like(x: f64, step: f64) -> f64 {
    let mut decimals = 0;
    let mut s = step;
    while s.fract().abs() > 1e-12 && decimals < 12 {
        s *= 10.0;
        decimals += 1;
    }
    let f = 10f64.powi(decimals);
    (x * f).round() / f
}

fn float(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        Value::Number(Number::from(x as i64))
    } else {
        Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}

/// The JSON Schema type of a value (`integer` for whole numbers).
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use serde_json::json;

    fn gen(
        doc: &Value,
        version: Version,
        at: &str,
        seed: u64,
        attempt: usize,
    ) -> Result<Value, String> {
        let mut g = Generator::new(
            doc,
            version,
            ChaCha8Rng::seed_from_u64(seed),
            strategy(attempt),
        );
        g.value(at, Fallback::Object)
    }

    #[test]
    fn the_same_seed_gives_the_same_value_and_another_seed_another() {
        let doc = json!({"s": {"type": "object", "required": ["a", "b"], "properties": {
            "a": {"type": "string"}, "b": {"type": "integer"}}}});
        let one = gen(&doc, Version::V3_1, "/s", 7, 2).unwrap();
        assert_eq!(one, gen(&doc, Version::V3_1, "/s", 7, 2).unwrap());
        let others: BTreeSet<String> = (0..8)
            .map(|s| gen(&doc, Version::V3_1, "/s", s, 2).unwrap().to_string())
            .collect();
        assert!(others.len() > 1, "{others:?}");
    }

    #[test]
    fn numeric_bounds_exclusive_and_multiple_of_are_kept() {
        let doc = json!({
            "a": {"type": "integer", "minimum": 10, "exclusiveMinimum": true, "maximum": 12, "exclusiveMaximum": true},
            "b": {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 12},
            "c": {"type": "integer", "multipleOf": 7, "minimum": 15, "maximum": 30},
            "d": {"type": "number", "multipleOf": 0.1, "minimum": 0.25, "maximum": 0.45},
            "e": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.01}
        });
        for seed in 0..20 {
            assert_eq!(gen(&doc, Version::V3_0, "/a", seed, 2).unwrap(), json!(11));
            assert_eq!(gen(&doc, Version::V3_1, "/b", seed, 2).unwrap(), json!(11));
            let c = gen(&doc, Version::V3_1, "/c", seed, 2)
                .unwrap()
                .as_i64()
                .unwrap();
            assert!(c == 21 || c == 28, "{c}");
            let d = gen(&doc, Version::V3_1, "/d", seed, 2).unwrap();
            assert!(d == json!(0.3) || d == json!(0.4), "{d}");
            assert_eq!(
                gen(&doc, Version::V3_1, "/e", seed, 2).unwrap(),
                json!(0.01)
            );
        }
    }

    #[test]
    fn all_of_is_merged_and_one_of_chooses_one_branch() {
        let doc = json!({
            "base": {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer", "minimum": 5, "maximum": 5}}},
            "s": {"allOf": [{"$ref": "#/base"}, {"required": ["name"], "properties": {"name": {"const": "x"}}}]},
            "u": {"oneOf": [{"type": "null"}, {"type": "string", "enum": ["only"]}]}
        });
        assert_eq!(
            gen(&doc, Version::V3_1, "/s", 1, 3).unwrap(),
            json!({"id": 5, "name": "x"})
        );
        for seed in 0..10 {
            assert_eq!(
                gen(&doc, Version::V3_1, "/u", seed, 3).unwrap(),
                json!("only")
            );
        }
    }

    #[test]
    fn ref_siblings_count_in_3_1_only() {
        let doc = json!({
            "t": {"type": "string"},
            "s": {"$ref": "#/t", "enum": ["x"]}
        });
        assert_eq!(gen(&doc, Version::V3_1, "/s", 1, 3).unwrap(), json!("x"));
        assert_ne!(gen(&doc, Version::V3_0, "/s", 1, 3).unwrap(), json!("x"));
    }

    #[test]
    fn recursion_ends_and_a_reference_cycle_is_named() {
        let doc = json!({
            "tree": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/tree"}}}},
            "endless": {"type": "object", "required": ["next"], "properties": {"next": {"$ref": "#/endless"}}},
            "a": {"$ref": "#/b"},
            "b": {"$ref": "#/a"}
        });
        let t = gen(&doc, Version::V3_1, "/tree", 3, 0).unwrap();
        assert!(t["name"].is_string());
        let e = gen(&doc, Version::V3_1, "/endless", 3, 0).unwrap_err();
        assert!(e.contains("recursive schema without a way to end"), "{e}");
        let c = gen(&doc, Version::V3_1, "/a", 3, 0).unwrap_err();
        assert!(c.contains("circular `$ref`"), "{c}");
    }

    #[test]
    fn examples_come_first_when_the_strategy_says() {
        let doc = json!({"s": {"type": "object", "required": ["n"], "properties": {
            "n": {"type": "string", "example": "octocat"}}}});
        assert_eq!(
            gen(&doc, Version::V3_0, "/s", 1, 0).unwrap(),
            json!({"n": "octocat"})
        );
        assert_ne!(
            gen(&doc, Version::V3_0, "/s", 1, 2).unwrap(),
            json!({"n": "octocat"})
        );
    }

    #[test]
    fn read_only_properties_are_left_out_and_discriminators_set() {
        let doc = json!({
            "s": {"type": "object", "properties": {"id": {"type": "string", "readOnly": true}, "name": {"type": "string"}}},
            "cat": {"type": "object", "required": ["kind"], "properties": {"kind": {"type": "string"}}},
            "pet": {"oneOf": [{"$ref": "#/cat"}], "discriminator": {"propertyName": "kind", "mapping": {"Cat": "#/cat"}}}
        });
        let v = gen(&doc, Version::V3_0, "/s", 1, 2).unwrap();
        assert!(v.get("id").is_none() && v.get("name").is_some(), "{v}");
        assert_eq!(
            gen(&doc, Version::V3_0, "/pet", 1, 2).unwrap(),
            json!({"kind": "Cat"})
        );
    }
}
