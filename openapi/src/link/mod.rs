//! Which operation's answer feeds which parameter, in which order to call the operations, and how
//! to look at a resource after an operation touched it.
//!
//! A path parameter that names a resource (`/orders/{id}`) cannot be generated: an id made up
//! here names nothing on the server. It is bound to the operation that makes such resources, and
//! its value is read, in this order, from:
//! 1. the document's own OpenAPI `links` (any parameter, any runtime expression);
//! 2. for a `POST` on the collection (`POST /orders` for `/orders/{id}`, path parameters before
//!    it compared by position, not by name), the creation's `Location` header, the segment at the
//!    parameter's place (what the server says the new resource's URL is);
//! 3. the creation's JSON answer: the field the success response's schema declares under a name
//!    like the parameter's (one level of wrapping such as `data` allowed), then, whatever the
//!    schema says (a framework's `{}`), the answer's own fields matched by name as Schemathesis
//!    infers links — the parameter's name (`account_id`, `accountId`), the resource's
//!    `{name}_id`, `id`, `uuid` — compared without case or separators;
//! 4. the field of the POST's own request body named like it (a name the client chose);
//!    or, for a `PUT` on the resource itself (`PUT /things/{name}`, the client names it), the
//!    value the PUT was sent with;
//! 5. last, the parameter's own `example`, `examples` and its schema's `example`, `examples`
//!    and `default`. Such a value names whatever the document's author had in mind, not a
//!    resource made for the request: the filled value says so
//!    ([`Source::Declared`](crate::request::Source::Declared)), so a caller can tell a verdict on
//!    a made resource from a probe of one that may not exist.
//!
//! An operation gets no value only when none of these yields one; the error lists where it
//! looked, in that order.
//!
//! The plan is data; [`LinkPlan::fill`] applies one binding to a built request from what the
//! caller recorded of the producer's answer, and validates the value it puts in.
//!
//! The rooms, each below the ones that use it: `names.rs` the naming conventions (a template's
//! shape, a parameter's candidate field names, the wrappers an answer may use); `binding.rs` what
//! a binding is and where its value may be read ([`ValueSource`]); `sources.rs` those places,
//! found in the document; `order.rs` the order to call the operations in; `verify.rs` how to look
//! at what an operation did; `plan.rs` the plan built from all of these; `read.rs` the value a
//! source gives in a recorded exchange, runtime expressions included; `fill.rs` choosing, among
//! the values read, the first valid one and putting it in a request.

mod binding;
mod fill;
mod names;
mod order;
mod plan;
mod read;
mod sources;
mod verify;

pub use binding::{Binding, ValueSource};
pub use fill::{FillError, VerificationError};
pub use plan::LinkPlan;
pub use read::{resource_field, Recorded};
pub use verify::{Verification, VerifyFrom};
