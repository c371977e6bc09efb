//! Generates the orders service from the shipped proto, compiled by protox (no protoc).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../proto/orders/v1/orders.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["../../proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .compile_fds(fds)?;
    Ok(())
}
