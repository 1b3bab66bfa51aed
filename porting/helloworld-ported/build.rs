fn main() -> Result<(), Box<dyn std::error::Error>> {
    rpc_codegen::compile_protos(&["proto/helloworld.proto"], &["proto"])?;
    Ok(())
}
