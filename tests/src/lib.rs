//! Integration-test support: code generated from the test protos.
