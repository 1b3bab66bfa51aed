//! Attribute macros that `rpc-core` re-exports. Use them through `rpc-core`, not from here.
//!
//! # Quick start
//!
//! ```ignore
//! #[rpc_core::async_trait] // or `#[tonic::async_trait]` in code ported from tonic
//! impl Greeter for MyGreeter {
//!     async fn say_hello(&self, request: Request<HelloRequest>)
//!         -> Result<Response<HelloReply>, Status> { /* ... */ }
//! }
//! ```

use proc_macro::TokenStream;

/// Leaves the item as it is: the attribute a tonic service's `impl` carries
/// (`#[tonic::async_trait]`), accepted so that ported code compiles unchanged.
///
/// tonic's generated traits are written with the `async_trait` crate, so their implementations
/// must be too. rpc-core's generated traits declare their handlers as native `async fn`s
/// (returning `impl Future + Send`), which a plain `async fn` in the `impl` implements; the
/// boxed signatures that the `async_trait` crate would give the `impl` do not match them. So
/// here the attribute changes nothing. On a trait of your own that needs boxed futures (to be
/// used as `dyn Trait`), use the `async_trait` crate itself.
#[proc_macro_attribute]
pub fn async_trait(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
