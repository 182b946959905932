//! Generates the gRPC client and server of the control plane from the method list below
//! (and a one-method service that only the data-plane benchmark uses).
//!
//! The messages are plain `prost` structs written in `src/control.rs` (documented there,
//! with their protobuf field numbers), so the build needs no `protoc`.

fn main() {
    let method = |name: &str, route: &str, input: &str, output: &str| {
        tonic_build::manual::Method::builder()
            .name(name)
            .route_name(route)
            .input_type(format!("crate::control::{input}"))
            .output_type(format!("crate::control::{output}"))
            .codec_path("tonic_prost::ProstCodec")
            .build()
    };
    let service = tonic_build::manual::Service::builder()
        .name("Control")
        .package("nostall.peer.v1")
        .method(method("hello", "Hello", "HelloRequest", "HelloReply"))
        .method(method(
            "register",
            "Register",
            "RegisterRequest",
            "RegisterReply",
        ))
        .method(method(
            "barrier",
            "Barrier",
            "BarrierRequest",
            "BarrierReply",
        ))
        .build();
    // Only `benches/data_plane.rs` uses this one: the same bytes over gRPC (one unary
    // call per sample), measured against the framed-TCP data plane that the service uses.
    let bench = tonic_build::manual::Service::builder()
        .name("FetchBench")
        .package("nostall.peer.bench")
        .method(
            tonic_build::manual::Method::builder()
                .name("fetch")
                .route_name("Fetch")
                .input_type("crate::FetchRequest")
                .output_type("crate::FetchReply")
                .codec_path("tonic_prost::ProstCodec")
                .build(),
        )
        .build();
    tonic_build::manual::Builder::new().compile(&[service, bench]);
}
