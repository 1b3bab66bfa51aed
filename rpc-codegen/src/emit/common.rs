//! What the client and server emitters share: identifiers, message types, lint allowances,
//! doc attributes and the static method table.

use proc_macro2::{Span, TokenStream};
use quote::quote;

use crate::model::{Method, Service};

/// An identifier from an escaped name (`r#match` becomes a raw identifier).
pub(crate) fn ident(name: &str) -> syn::Ident {
    match name.strip_prefix("r#") {
        Some(raw) => syn::Ident::new_raw(raw, Span::call_site()),
        None => syn::Ident::new(name, Span::call_site()),
    }
}

/// The type of a message as seen from inside a generated `<service>_client`/`_server` module.
///
/// prost-build gives paths relative to the package module (`AddRequest`, `outer::Inner`,
/// `super::other::Msg`), which need one more `super::`; absolute paths (`::prost_types::Timestamp`,
/// `crate::x::Y`), the unit type (`google.protobuf.Empty`) and the primitives that wrapper types
/// map to (`bool`, `i32`, ...) stay as they are.
///
/// # Panics
///
/// Panics if `rust_type` is not a Rust type: prost-build produced it, so that is a bug there.
pub fn message_type(rust_type: &str) -> syn::Type {
    let mut ty: syn::Type = match syn::parse_str(rust_type) {
        Ok(ty) => ty,
        Err(err) => panic!("prost-build gave `{rust_type}`, which is not a Rust type: {err}"),
    };
    if let syn::Type::Path(type_path) = &mut ty {
        let path = &mut type_path.path;
        let first = path.segments.first().map(|s| s.ident.to_string());
        let is_absolute = path.leading_colon.is_some()
            || type_path.qself.is_some()
            || matches!(first.as_deref(), Some("crate" | "$crate"));
        let is_primitive = path.segments.len() == 1
            && matches!(
                first.as_deref(),
                Some(
                    "bool"
                        | "i8"
                        | "i16"
                        | "i32"
                        | "i64"
                        | "i128"
                        | "isize"
                        | "u8"
                        | "u16"
                        | "u32"
                        | "u64"
                        | "u128"
                        | "usize"
                        | "f32"
                        | "f64"
                        | "str"
                        | "char"
                )
            );
        if !is_absolute && !is_primitive {
            path.segments
                .insert(0, syn::PathSegment::from(ident("super")));
        }
    }
    ty
}

/// What opens each generated module. An inner `#![allow(..)]`: names come from the `.proto` (a
/// trait `Self_`, a method `into_foo(&self)` or `add(&self, ..)`, a module named like its
/// parent package), and pedantic lints ask for what generated stubs cannot say (`# Errors`
/// sections). Then `rpc-core` imported as `rpc_runtime`, under whatever name (`runtime`) the
/// user's crate depends on it: the module's code names it only through that import, and the
/// module's other names are all generated, so the import collides with none.
pub(crate) fn module_prelude(runtime: &syn::Ident) -> TokenStream {
    quote! {
        #![allow(
            non_camel_case_types,
            non_snake_case,
            clippy::module_inception,
            clippy::should_implement_trait,
            clippy::wrong_self_convention,
            clippy::missing_errors_doc,
            clippy::must_use_candidate,
            clippy::needless_pass_by_value,
            clippy::doc_markdown,
            clippy::too_many_lines
        )]
        #[allow(unused_imports)]
        use ::#runtime as rpc_runtime;
    }
}

/// `#[doc = "..."]` attributes for doc lines.
pub(crate) fn doc_attrs(lines: &[String]) -> TokenStream {
    let lines = lines.iter();
    quote! { #( #[doc = #lines] )* }
}

/// The doc attributes of a method as a trait method or client function: the `.proto` comment,
/// then the rename note if any.
pub(crate) fn method_docs(method: &Method, fallback: &str) -> TokenStream {
    let mut lines = method.docs.clone();
    if lines.is_empty() {
        lines.push(format!(" {fallback}"));
    }
    if let Some(note) = &method.rename_note {
        lines.push(String::new());
        lines.push(format!(" {note}"));
    }
    doc_attrs(&lines)
}

/// The `static METHODS` array both modules carry.
pub(crate) fn methods_static(service: &Service) -> TokenStream {
    let count = service.methods.len();
    let service_name = &service.full_name;
    let descriptors = service.methods.iter().map(|m| {
        let name = &m.proto_name;
        let path = &m.path;
        let kind = ident(m.kind.variant_name());
        quote! {
            rpc_runtime::codegen::MethodDescriptor::new(
                #service_name,
                #name,
                #path,
                rpc_runtime::codegen::MethodKind::#kind,
            )
        }
    });
    quote! {
        /// The methods of this service, in `.proto` order.
        static METHODS: [rpc_runtime::codegen::MethodDescriptor; #count] = [ #( #descriptors ),* ];
    }
}
