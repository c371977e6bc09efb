//! The built-in orders resource: the store on a real database (`store`: SQLite by default,
//! PostgreSQL when replicas share it) and its routes ([`routes`]).
//!
//! The arrows inside run one way: `routes` → `store` → the backends (`sqlite`, `postgres`) →
//! `backend`, what they all speak; no backend knows the store. `grpc` serves `orders.v1.Orders`
//! on the store.

mod backend;
pub(crate) mod grpc;
mod postgres;
pub mod routes;
mod sqlite;
mod store;

pub use backend::StoreError;
pub use postgres::SharedCounters;
pub use store::{Orders, ResourceReply};
