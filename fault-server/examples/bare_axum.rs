//! The benchmark anchor: a bare axum hello-world, built with the same dependencies and profile as
//! the fault server, so `wrk` against both measures only what the fault server adds.
//!
//!   cargo run --release -p fault-server --example bare_axum -- 127.0.0.1:8081

use axum::routing::get;
use axum::Router;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8081".to_string());
    let app = Router::new().fallback(get(|| async { "ok\n" }));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await
}
