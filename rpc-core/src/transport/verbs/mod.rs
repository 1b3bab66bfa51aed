//! verbs
#![allow(missing_docs)]
pub struct VerbsRecv;
impl VerbsRecv {
    pub fn bytes(&self) -> &[u8] {
        &[]
    }
}
pub struct VerbsSend;
impl VerbsSend {
    pub fn bytes(&self) -> &[u8] {
        &[]
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut []
    }
}
