//! The shipped `proto/orders/v1/orders.proto`, built into the crate: the fault server serves
//! `orders.v1.Orders` on its store, and a client may call it, with no `.proto` file at hand.
//!
//! Why the text and not a path: a binary installed elsewhere has no checkout beside it. The file
//! is compiled by protox as it is (it imports nothing), so what is served is what is shipped;
//! `tests/orders_proto.rs` holds the file itself to protoc as grpcio-tools ships it.

use crate::schema::{Schema, SchemaError};

/// The file's name, as an import path names it.
pub const FILE: &str = "orders/v1/orders.proto";

/// The file's text.
pub const PROTO: &str = include_str!("../../proto/orders/v1/orders.proto");

/// The service's full name.
pub const SERVICE: &str = "orders.v1.Orders";

/// `CreateOrder`'s method name.
pub const CREATE_ORDER: &str = "orders.v1.Orders/CreateOrder";

/// `GetOrder`'s method name.
pub const GET_ORDER: &str = "orders.v1.Orders/GetOrder";

/// The orders service compiled from the built-in text.
pub fn schema() -> Result<Schema, SchemaError> {
    Schema::from_source(FILE, PROTO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_text_is_the_shipped_file_and_compiles() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../proto/orders/v1/orders.proto"
        );
        assert_eq!(
            std::fs::read_to_string(path).expect("the shipped file"),
            PROTO
        );
        let s = schema().expect("it compiles");
        assert_eq!(s.services(), [SERVICE]);
        assert!(s.method(CREATE_ORDER).expect("CreateOrder").is_unary());
        assert!(s.method(GET_ORDER).expect("GetOrder").is_unary());
    }
}
