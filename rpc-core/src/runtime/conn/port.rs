//! A connection as the far end of its calls' handles: what they hand over becomes work for
//! the connection's owner.

use std::sync::Arc;

use super::super::call::Encode;
use super::super::port::CallPort;
use super::super::stream::{Cancel, StreamShared};
use super::{Caller, Conn, UnaryReply, Work, UNARY};
use crate::protocol::v2::Kind;
use crate::{MetadataMap, Status};

impl CallPort for Conn {
    fn max_message_size(&self) -> usize {
        self.peer_hello.max_message_size as usize
    }

    fn reply(&self, call: u64, headers: MetadataMap, message: &dyn Encode, trailers: MetadataMap) {
        let frame = self.encode(Kind::Message, UNARY, message);
        self.submit_reply(UnaryReply {
            call,
            frame,
            headers: headers.into_block(),
            trailers,
        });
    }

    fn end(&self, call: u64, status: Status) {
        self.submit(Work::End { call, status });
    }

    fn headers(&self, call: u64, headers: &MetadataMap) {
        self.submit(Work::Headers {
            call,
            block: headers.encode(),
        });
    }

    fn send(&self, stream: &Arc<StreamShared>, message: &dyn Encode) {
        let frame = self.encode(Kind::Message, 0, message);
        self.submit(Work::Send {
            stream: Arc::clone(stream),
            frame,
        });
    }

    fn half_close(&self, stream: &Arc<StreamShared>) {
        self.submit(Work::HalfClose(Arc::clone(stream)));
    }

    fn cancel(&self, stream: &Arc<StreamShared>, status: Status) {
        self.submit(Work::Cancel {
            caller: Caller::Stream(Arc::clone(stream)),
            status,
        });
    }

    fn consumed(&self, stream: &Arc<StreamShared>, bytes: u32) {
        self.submit(Work::Consumed {
            stream: Arc::clone(stream),
            bytes,
        });
    }

    fn attach(&self, call: u64, task: Arc<dyn Cancel>) {
        self.submit(Work::Attach { call, task });
    }
}
