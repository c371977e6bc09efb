//! The plan: every binding of a document, the order to call its operations in, how to look at
//! what each unsafe one did, and what the plan noticed on the way.

use std::collections::{BTreeMap, BTreeSet};

use super::binding::{Binding, ValueSource};
use super::names::{is_param, shape};
use super::order::order;
use super::sources::{creation_sources, declared_sources};
use super::verify::{verification, Verification};
use crate::operation::{LinkTarget, Location, Method};
use crate::Api;

/// The bindings of a document and the order to call its operations in.
#[derive(Debug, Clone)]
pub struct LinkPlan {
    bindings: Vec<Binding>,
    order: Vec<String>,
    verifications: BTreeMap<String, Verification>,
    notes: Vec<String>,
}

impl LinkPlan {
    /// The plan for `api`'s operations.
    pub fn new(api: &Api) -> LinkPlan {
        let ops = api.operations();
        let doc = api.document().json();
        let shapes: Vec<Vec<String>> = ops.iter().map(|o| shape(&o.path)).collect();
        let mut notes = Vec::new();
        let mut bindings: Vec<Binding> = Vec::new();
        // 1. The document's links.
        for producer in ops {
            for response in &producer.responses {
                for link in &response.links {
                    let target = match &link.target {
                        LinkTarget::OperationId(id) => ops.iter().find(|o| &o.id == id),
                        LinkTarget::OperationRef(p) => ops.iter().find(|o| &o.pointer == p),
                    };
                    let Some(consumer) = target else {
                        notes.push(format!(
                            "{}: link `{}` leads to no operation of the document",
                            link.pointer, link.name
                        ));
                        continue;
                    };
                    for (name, expression) in &link.parameters {
                        let (location, bare) = match name.split_once('.') {
                            Some(("path", n)) => (Some(Location::Path), n),
                            Some(("query", n)) => (Some(Location::Query), n),
                            Some(("header", n)) => (Some(Location::Header), n),
                            Some(("cookie", n)) => (Some(Location::Cookie), n),
                            _ => (None, name.as_str()),
                        };
                        let Some(param) = consumer
                            .parameters
                            .iter()
                            .find(|p| location.is_none_or(|l| l == p.location) && p.name == bare)
                        else {
                            notes.push(format!(
                                "{}: link `{}` names parameter `{name}`, which {} does not have",
                                link.pointer,
                                link.name,
                                consumer.label()
                            ));
                            continue;
                        };
                        let source = ValueSource::Link {
                            name: link.name.clone(),
                            status: response.status.clone(),
                            expression: expression.clone(),
                        };
                        match bindings.iter_mut().find(|b| {
                            b.consumer == consumer.id
                                && b.producer == producer.id
                                && b.location == param.location
                                && b.parameter == param.name
                        }) {
                            Some(b) => b.sources.push(source),
                            None => bindings.push(Binding {
                                consumer: consumer.id.clone(),
                                location: param.location,
                                parameter: param.name.clone(),
                                producer: producer.id.clone(),
                                sources: vec![source],
                            }),
                        }
                    }
                }
            }
        }
        // 2 and 3. Creations on the collection, or a PUT on the resource.
        for consumer in ops {
            let segments: Vec<&str> = consumer.path.trim_end_matches('/').split('/').collect();
            for (i, segment) in segments.iter().enumerate() {
                if !is_param(segment) || i == 0 {
                    continue;
                }
                let name = &segment[1..segment.len() - 1];
                let collection = segments[..i].join("/");
                let resource = segments[..=i].join("/");
                let collection_shape = shape(&collection);
                let resource_shape = shape(&resource);
                let creator = ops.iter().zip(&shapes).find_map(|(o, s)| {
                    (o.method == Method::Post && *s == collection_shape && o.id != consumer.id)
                        .then_some(o)
                });
                let linked = |b: &Binding| {
                    b.consumer == consumer.id && b.location == Location::Path && b.parameter == name
                };
                if bindings.iter().any(linked) {
                    // A link from the creation itself: what its exchange says otherwise comes
                    // after the link's expression.
                    if let Some(p) = creator {
                        let more = creation_sources(doc, p, name, segments[i - 1], &resource);
                        if let Some(b) = bindings
                            .iter_mut()
                            .find(|b| linked(b) && b.producer == p.id)
                        {
                            for s in more {
                                if !b.sources.contains(&s) {
                                    b.sources.push(s);
                                }
                            }
                        }
                    }
                    continue;
                }
                if let Some(p) = creator {
                    let sources = creation_sources(doc, p, name, segments[i - 1], &resource);
                    bindings.push(Binding {
                        consumer: consumer.id.clone(),
                        location: Location::Path,
                        parameter: name.to_string(),
                        producer: p.id.clone(),
                        sources,
                    });
                    continue;
                }
                let putter = ops.iter().zip(&shapes).find_map(|(o, s)| {
                    (o.method == Method::Put && *s == resource_shape && o.id != consumer.id)
                        .then_some(o)
                });
                if let Some(p) = putter {
                    let own = p
                        .path
                        .trim_end_matches('/')
                        .split('/')
                        .nth(i)
                        .map(|s| s.trim_matches(|c| c == '{' || c == '}').to_string())
                        .unwrap_or_else(|| name.to_string());
                    bindings.push(Binding {
                        consumer: consumer.id.clone(),
                        location: Location::Path,
                        parameter: name.to_string(),
                        producer: p.id.clone(),
                        sources: vec![ValueSource::RequestPath(own)],
                    });
                }
            }
        }
        // 5. Last, for a path parameter, the document's own examples and default.
        for b in bindings.iter_mut().filter(|b| b.location == Location::Path) {
            if let Some(consumer) = ops.iter().find(|o| o.id == b.consumer) {
                b.sources
                    .extend(declared_sources(doc, consumer, &b.parameter));
            }
        }
        let order = order(ops, &bindings, &mut notes);
        let verifications = ops
            .iter()
            .filter(|o| o.is_unsafe())
            .map(|o| (o.id.clone(), verification(doc, ops, &shapes, o)))
            .collect();
        LinkPlan {
            bindings,
            order,
            verifications,
            notes,
        }
    }

    /// Every binding.
    pub fn bindings(&self) -> &[Binding] {
        &self.bindings
    }

    /// The bindings of `consumer`'s parameters.
    pub fn bindings_for<'p>(&'p self, consumer: &'p str) -> impl Iterator<Item = &'p Binding> + 'p {
        self.bindings.iter().filter(move |b| b.consumer == consumer)
    }

    /// The operations whose answers `consumer` needs, each once, in plan order.
    pub fn producers_of(&self, consumer: &str) -> Vec<&str> {
        let wanted: BTreeSet<&str> = self
            .bindings_for(consumer)
            .map(|b| b.producer.as_str())
            .collect();
        self.order
            .iter()
            .map(String::as_str)
            .filter(|id| wanted.contains(id))
            .collect()
    }

    /// Every operation id, producers before their consumers, and of a resource's consumers the
    /// DELETEs last.
    pub fn order(&self) -> &[String] {
        &self.order
    }

    /// What the plan noticed: links to nothing, a cycle broken.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// How to look at what unsafe operation `id` did.
    pub fn verification(&self, id: &str) -> Option<&Verification> {
        self.verifications.get(id)
    }
}
