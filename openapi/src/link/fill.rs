//! Choosing a bound value: the sources tried in order, each value read checked against the
//! parameter's schema, the first valid one put in the request; and why none was, when none was.

use serde_json::Value;

use super::binding::{Binding, ValueSource};
use super::names::is_param;
use super::plan::LinkPlan;
use super::read::{read, Recorded};
use super::verify::{Verification, VerifyFrom};
use crate::operation::Location;
use crate::request::{Request, RequestBuilder, Source};

/// A bound value that could not be filled in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FillError {
    /// The producer's answer is not a success.
    #[error("{producer} answered {status}: no resource to take `{parameter}` from")]
    NotCreated {
        /// The producer.
        producer: String,
        /// The parameter.
        parameter: String,
        /// The status it answered.
        status: u16,
    },
    /// None of the sources gave a value.
    #[error("{producer}'s answer has no value for `{parameter}` (looked at: {looked})")]
    NoValue {
        /// The producer.
        producer: String,
        /// The parameter.
        parameter: String,
        /// The sources tried.
        looked: String,
    },
    /// The value found is not valid for the parameter.
    #[error("`{parameter}` = {value} (from {producer}'s {source_name}) is not valid: {reason}")]
    Invalid {
        /// The producer.
        producer: String,
        /// The parameter.
        parameter: String,
        /// The value found.
        value: String,
        /// The source that gave it.
        source_name: String,
        /// The validator's words.
        reason: String,
    },
}

/// Why a verification request could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerificationError {
    /// The GET itself could not be built.
    #[error("{0}")]
    Build(crate::Unbuildable),
    /// Its resource parameter could not be filled.
    #[error("{0}")]
    Fill(FillError),
}

impl LinkPlan {
    /// Fills the parameters of `request` that `producer` feeds, from what the caller recorded of
    /// `producer`'s exchange; each value is validated against its parameter's schema. Returns the
    /// names filled.
    pub fn fill(
        &self,
        builder: &mut RequestBuilder<'_>,
        request: &mut Request,
        producer: &str,
        recorded: &Recorded<'_>,
    ) -> Result<Vec<String>, FillError> {
        let mut filled = Vec::new();
        let bindings: Vec<&Binding> = self
            .bindings()
            .iter()
            .filter(|b| b.consumer == request.operation_id && b.producer == producer)
            .collect();
        for b in bindings {
            self.apply(
                builder,
                request,
                b.location,
                &b.parameter,
                producer,
                &b.sources,
                recorded,
            )
            .map_err(|e| match e {
                // The last place a path parameter's value may come from, named even when empty,
                // so the reader knows what would have let the request be made.
                FillError::NoValue {
                    producer,
                    parameter,
                    mut looked,
                } if b.location == Location::Path && !b.sources.iter().any(|s| s.is_declared()) => {
                    looked.push_str("; the parameter declares no example, examples or default");
                    FillError::NoValue {
                        producer,
                        parameter,
                        looked,
                    }
                }
                e => e,
            })?;
            filled.push(b.parameter.clone());
        }
        Ok(filled)
    }

    /// A request that looks at the resource operation `sent` (already sent) touched, with the
    /// document's own GET, filled from `sent` or from its `recorded` answer; None when the document
    /// has no such GET.
    pub fn verification_request(
        &self,
        builder: &mut RequestBuilder<'_>,
        sent: &Request,
        recorded: &Recorded<'_>,
    ) -> Result<Option<Request>, VerificationError> {
        let Some(Verification {
            get: Some((get_id, param, from)),
            ..
        }) = self.verification(&sent.operation_id)
        else {
            return Ok(None);
        };
        let api = builder.api();
        let Some(get) = api.operation(get_id) else {
            return Ok(None);
        };
        let mut request = builder.build(get).map_err(VerificationError::Build)?;
        match from {
            VerifyFrom::Response(sources) => {
                self.apply(
                    builder,
                    &mut request,
                    Location::Path,
                    param,
                    &sent.operation_id,
                    sources,
                    recorded,
                )
                .map_err(VerificationError::Fill)?;
            }
            VerifyFrom::SamePath => copy_path_params(&mut request, sent),
        }
        Ok(Some(request))
    }

    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        builder: &mut RequestBuilder<'_>,
        request: &mut Request,
        location: Location,
        parameter: &str,
        producer: &str,
        sources: &[ValueSource],
        recorded: &Recorded<'_>,
    ) -> Result<(), FillError> {
        if !(200..300).contains(&recorded.status) {
            return Err(FillError::NotCreated {
                producer: producer.to_string(),
                parameter: parameter.to_string(),
                status: recorded.status,
            });
        }
        let api = builder.api();
        let schema = api
            .operation(&request.operation_id)
            .and_then(|o| o.parameter(location, parameter))
            .and_then(|p| p.schema.clone());
        let template = request.path_template.clone();
        let mut last_invalid = None;
        let mut refused_declared: Vec<String> = Vec::new();
        for source in sources {
            if source.is_declared() {
                // Another producer's answer already named the resource: keep it.
                if matches!(
                    request.param(location, parameter).map(|p| &p.source),
                    Some(Source::Linked { .. })
                ) {
                    return Ok(());
                }
            }
            let Some((found, how)) = read(source, recorded, &template, parameter, location) else {
                continue;
            };
            let candidates = match (&found, &schema) {
                (Value::String(s), Some(_)) => {
                    let mut c = vec![found.clone()];
                    if let Ok(n) = serde_json::from_str::<serde_json::Number>(s) {
                        c.push(Value::Number(n));
                    }
                    c
                }
                (Value::Number(n), Some(_)) => vec![found.clone(), Value::String(n.to_string())],
                _ => vec![found.clone()],
            };
            let mut reason = String::new();
            for value in candidates {
                let verdict = match &schema {
                    Some(s) => builder.check(s, &value),
                    None => Ok(()),
                };
                match verdict {
                    Ok(()) => {
                        let from = match source {
                            ValueSource::Declared { what, pointer, .. } => Source::Declared {
                                what: what.clone(),
                                pointer: pointer.clone(),
                                operation_id: producer.to_string(),
                                why: unfilled(
                                    last_invalid.take(),
                                    producer,
                                    parameter,
                                    sources,
                                    &refused_declared,
                                )
                                .to_string(),
                            },
                            _ => Source::Linked {
                                operation_id: producer.to_string(),
                                how: how.clone(),
                            },
                        };
                        request.set_param(location, parameter, value, from);
                        return Ok(());
                    }
                    Err(e) => reason = e,
                }
            }
            if source.is_declared() {
                refused_declared.push(format!("{source} {found} (not valid: {reason})"));
            } else if last_invalid.is_none() {
                last_invalid = Some(FillError::Invalid {
                    producer: producer.to_string(),
                    parameter: parameter.to_string(),
                    value: found.to_string(),
                    source_name: how,
                    reason,
                });
            }
        }
        Err(unfilled(
            last_invalid,
            producer,
            parameter,
            sources,
            &refused_declared,
        ))
    }
}

/// Why the exchange gave no value: the first invalid value it gave, else every place looked
/// at, in order (the document's own values last, each with why it was refused).
fn unfilled(
    invalid: Option<FillError>,
    producer: &str,
    parameter: &str,
    sources: &[ValueSource],
    refused_declared: &[String],
) -> FillError {
    if let Some(e) = invalid {
        return e;
    }
    let mut looked: Vec<String> = sources
        .iter()
        .filter(|s| !s.is_declared())
        .map(ToString::to_string)
        .collect();
    looked.extend(refused_declared.iter().cloned());
    FillError::NoValue {
        producer: producer.to_string(),
        parameter: parameter.to_string(),
        looked: looked.join(", "),
    }
}

/// Copies `sent`'s path parameters into `request`'s, by position in their templates.
fn copy_path_params(request: &mut Request, sent: &Request) {
    let names = |t: &str| -> Vec<(usize, String)> {
        t.split('/')
            .enumerate()
            .filter(|(_, s)| is_param(s))
            .map(|(i, s)| (i, s[1..s.len() - 1].to_string()))
            .collect()
    };
    let from = names(&sent.path_template);
    for (i, name) in names(&request.path_template.clone()) {
        if let Some((_, sent_name)) = from.iter().find(|(j, _)| *j == i) {
            if let Some(v) = sent.param(Location::Path, sent_name) {
                let value = v.value.clone();
                request.set_param(
                    Location::Path,
                    &name,
                    value,
                    Source::Linked {
                        operation_id: sent.operation_id.clone(),
                        how: format!("the request's path parameter `{sent_name}`"),
                    },
                );
            }
        }
    }
}
