//! The adapter between prost-build and this crate: a [`prost_build::ServiceGenerator`] that
//! turns each `prost_build::Service` into a [`crate::model::Service`] and
//! appends the emitted modules to the package's output.

use std::collections::{HashMap, HashSet};

use prost_types::{FileDescriptorProto, FileDescriptorSet};

use crate::emit::{self, Emit};
use crate::model::{self, MethodSpec, Service};

/// Generates the client and server modules of every service prost-build meets.
#[derive(Debug)]
pub struct RpcServiceGenerator {
    emit: Emit,
    /// Per protobuf package: the Rust module names in the package's module that are taken,
    /// by prost-build (nested-type modules, sub-packages) or by services generated so far.
    taken_modules: HashMap<String, HashSet<String>>,
    /// The parsed files, for each service's descriptor set (server reflection).
    files: Vec<FileDescriptorProto>,
}

impl RpcServiceGenerator {
    /// A generator emitting the halves `emit` selects, that avoids the module names prost-build
    /// will use for the files of `fds`.
    pub fn new(emit: Emit, fds: &FileDescriptorSet) -> RpcServiceGenerator {
        RpcServiceGenerator {
            emit,
            taken_modules: prost_modules(fds),
            files: fds.file.clone(),
        }
    }

    /// Converts prost-build's view of a service into the model.
    pub fn model(&mut self, service: &prost_build::Service) -> Service {
        let methods = service
            .methods
            .iter()
            .map(|m| MethodSpec {
                proto_name: m.proto_name.clone(),
                input_type: m.input_type.clone(),
                output_type: m.output_type.clone(),
                input_proto_type: m.input_proto_type.clone(),
                output_proto_type: m.output_proto_type.clone(),
                client_streaming: m.client_streaming,
                server_streaming: m.server_streaming,
                docs: doc_lines(&m.comments),
            })
            .collect();
        let taken = self
            .taken_modules
            .entry(service.package.clone())
            .or_default();
        let mut model = Service::new(
            &service.package,
            &service.proto_name,
            doc_lines(&service.comments),
            methods,
            taken,
        );
        model.descriptor_set = descriptor_set(&self.files, &service.package, &service.proto_name);
        model
    }
}

impl prost_build::ServiceGenerator for RpcServiceGenerator {
    fn generate(&mut self, service: prost_build::Service, buf: &mut String) {
        let model = self.model(&service);
        buf.push('\n');
        buf.push_str(&emit::service_source(&model, &self.emit));
    }
}

/// The encoded `FileDescriptorSet` of the file that defines service `name` of `package`
/// and of all it imports, imports first, without source info (comments and spans only
/// make it larger); empty if no file of `files` defines it.
pub fn descriptor_set(files: &[FileDescriptorProto], package: &str, name: &str) -> Vec<u8> {
    let by_name: HashMap<&str, &FileDescriptorProto> =
        files.iter().map(|f| (f.name(), f)).collect();
    let Some(root) = files
        .iter()
        .find(|f| f.package() == package && f.service.iter().any(|s| s.name() == name))
    else {
        return Vec::new();
    };
    // Depth-first, dependencies before dependents.
    fn visit<'a>(
        file: &'a FileDescriptorProto,
        by_name: &HashMap<&str, &'a FileDescriptorProto>,
        seen: &mut HashSet<&'a str>,
        out: &mut Vec<FileDescriptorProto>,
    ) {
        if !seen.insert(file.name()) {
            return;
        }
        for dep in &file.dependency {
            if let Some(d) = by_name.get(dep.as_str()) {
                visit(d, by_name, seen, out);
            }
        }
        let mut file = file.clone();
        file.source_code_info = None;
        out.push(file);
    }
    let mut out = Vec::new();
    visit(root, &by_name, &mut HashSet::new(), &mut out);
    prost::Message::encode_to_vec(&FileDescriptorSet { file: out })
}

/// The rustdoc lines of a `.proto` comment: leading comment, then trailing comment (detached
/// comments belong to nothing), sanitized.
fn doc_lines(comments: &prost_build::Comments) -> Vec<String> {
    let mut lines = comments.leading.clone();
    if !lines.is_empty() && !comments.trailing.is_empty() {
        lines.push(String::new());
    }
    lines.extend(comments.trailing.iter().cloned());
    model::sanitize_doc_lines(&lines)
}

/// For each protobuf package of `fds`, the module names prost-build puts in its Rust module:
/// one per top-level message that has nested messages, enums or (real) oneofs, and one per
/// direct sub-package (when the user nests `a.b` inside `a`, as prost-build's include file
/// does).
pub fn prost_modules(fds: &FileDescriptorSet) -> HashMap<String, HashSet<String>> {
    let mut modules: HashMap<String, HashSet<String>> = HashMap::new();
    for file in &fds.file {
        let package = file.package();
        let taken = modules.entry(package.to_owned()).or_default();
        for message in &file.message_type {
            let has_nested = message
                .nested_type
                .iter()
                .any(|n| !n.options.as_ref().is_some_and(|o| o.map_entry()));
            let has_oneof = message
                .field
                .iter()
                .any(|f| f.oneof_index.is_some() && !f.proto3_optional());
            if has_nested || !message.enum_type.is_empty() || has_oneof {
                taken.insert(module_name(message.name()));
            }
        }
        let segments: Vec<&str> = package.split('.').filter(|s| !s.is_empty()).collect();
        for depth in 0..segments.len() {
            modules
                .entry(segments[..depth].join("."))
                .or_default()
                .insert(module_name(segments[depth]));
        }
    }
    modules
}

/// The module name prost-build gives a message's nested types or a package segment, unescaped.
fn module_name(proto_name: &str) -> String {
    model::unraw(&model::escape_ident(&model::snake_case(proto_name))).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_types::{
        DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
        MessageOptions, OneofDescriptorProto,
    };

    fn message(name: &str) -> DescriptorProto {
        DescriptorProto {
            name: Some(name.to_owned()),
            ..Default::default()
        }
    }

    #[test]
    fn reserves_modules_prost_emits() {
        let mut with_enum = message("CalculatorClient");
        with_enum.enum_type.push(EnumDescriptorProto {
            name: Some("E".to_owned()),
            ..Default::default()
        });
        let mut with_oneof = message("HasOneof");
        with_oneof.oneof_decl.push(OneofDescriptorProto {
            name: Some("choice".to_owned()),
            ..Default::default()
        });
        with_oneof.field.push(FieldDescriptorProto {
            name: Some("a".to_owned()),
            oneof_index: Some(0),
            ..Default::default()
        });
        let mut optional_only = message("OptionalOnly");
        optional_only.oneof_decl.push(OneofDescriptorProto {
            name: Some("_a".to_owned()),
            ..Default::default()
        });
        optional_only.field.push(FieldDescriptorProto {
            name: Some("a".to_owned()),
            oneof_index: Some(0),
            proto3_optional: Some(true),
            ..Default::default()
        });
        let mut map_only = message("MapOnly");
        map_only.nested_type.push(DescriptorProto {
            name: Some("EntriesEntry".to_owned()),
            options: Some(MessageOptions {
                map_entry: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut nested = message("Match");
        nested.nested_type.push(message("Inner"));

        let fds = FileDescriptorSet {
            file: vec![FileDescriptorProto {
                name: Some("a/b/c.proto".to_owned()),
                package: Some("a.b.c".to_owned()),
                message_type: vec![with_enum, with_oneof, optional_only, map_only, nested],
                ..Default::default()
            }],
        };
        let modules = prost_modules(&fds);
        let c = &modules["a.b.c"];
        let mut names: Vec<_> = c.iter().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["calculator_client", "has_oneof", "match"]);
        assert!(modules[""].contains("a"));
        assert!(modules["a"].contains("b"));
        assert!(modules["a.b"].contains("c"));
    }
}
