//! The built-in orders resource: the store on a real database ([`store`]) and its routes
//! ([`routes`]).

pub mod routes;
mod store;

pub use store::{Orders, ResourceReply, StoreError};
