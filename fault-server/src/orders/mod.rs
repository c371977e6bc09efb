//! The built-in orders resource: the store on a real database (`store`: SQLite by default,
//! PostgreSQL when replicas share it) and its routes ([`routes`]).

pub(crate) mod grpc;
mod postgres;
pub mod routes;
mod sqlite;
mod store;

pub use postgres::SharedCounters;
pub use store::{Orders, ResourceReply, StoreError};
