//! A bare tonic server of `orders.v1.Orders`, generated from `proto/orders/v1/orders.proto`:
//! `GetOrder` answers a canned order with the id asked for, `CreateOrder` echoes its request as a
//! pending order. Nothing else: no store, no journal, no faults. `bench/run.sh --only grpc`
//! loads it beside the fault server, configured with the same canned answer, to measure what the
//! fault server's gRPC serving costs over tonic's.
//!
//! Usage: `tonic-orders ADDR` (`127.0.0.1:0` picks a port); prints `listening on ADDR`.

use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

pub mod orders {
    tonic::include_proto!("orders.v1");
}

use orders::orders_server::{Orders, OrdersServer};
use orders::{CreateOrderRequest, GetOrderRequest, Order, OrderStatus};

struct Bare;

#[tonic::async_trait]
impl Orders for Bare {
    async fn create_order(
        &self,
        request: Request<CreateOrderRequest>,
    ) -> Result<Response<Order>, Status> {
        let r = request.into_inner();
        Ok(Response::new(Order {
            id: format!("ord_{}", r.request_id),
            status: OrderStatus::Pending as i32,
            request_id: r.request_id,
            sku: r.sku,
            qty: r.qty,
            amount: r.amount,
            attributes: r.attributes,
        }))
    }

    async fn get_order(&self, request: Request<GetOrderRequest>) -> Result<Response<Order>, Status> {
        Ok(Response::new(Order {
            id: request.into_inner().id,
            status: OrderStatus::Paid as i32,
            sku: "SKU-1".into(),
            qty: 1,
            amount: 1000,
            ..Default::default()
        }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: std::net::SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into())
        .parse()?;
    // TCP_NODELAY as tonic's own `serve(addr)` sets it (and as the fault server does).
    let incoming = TcpIncoming::bind(addr)?.with_nodelay(Some(true));
    println!("listening on {}", incoming.local_addr()?);
    tonic::transport::Server::builder()
        .add_service(OrdersServer::new(Bare))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}
