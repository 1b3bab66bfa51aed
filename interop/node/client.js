#!/usr/bin/env node
// A stock @grpc/grpc-js interop client: the cases of the gRPC interop test descriptions,
// the same as ../python/client.py, with the same flags, output and exit status:
//
//   node client.js --server_host H --server_port N --test_case=all|NAME[,NAME...] [--use_tls=false]
//
// One line per case, "case NAME: PASS" or "case NAME: FAIL <reason>", then
// "summary: N passed, N failed"; exit 0 only if every case run passed (1 if one failed,
// 2 on a bad command line). All cases share one channel; each case has its own deadline
// (--case_timeout_s, default 10) that its calls carry, and a watchdog a little past it.
// After each cancel or timeout case an EmptyCall on the same channel must succeed too.
//
// The packages come from $INTEROP_DIR/node/node_modules (default
// <repo>/target/interop/node, put there by ../install.sh); the .proto files are read at
// run time from <repo>/proto/grpc/testing/.
'use strict';

const path = require('path');
const { createRequire } = require('module');

const REPO = path.resolve(__dirname, '..', '..');
const INTEROP_DIR = process.env.INTEROP_DIR || path.join(REPO, 'target', 'interop');
const PROTO_DIR = path.join(REPO, 'proto');

function loadPackages() {
  const req = createRequire(path.join(INTEROP_DIR, 'node', 'package.json'));
  try {
    return [req('@grpc/grpc-js'), req('@grpc/proto-loader')];
  } catch (err) {
    process.stderr.write(`cannot load @grpc/grpc-js from ${INTEROP_DIR}/node: run interop/install.sh (${err.message})\n`);
    process.exit(2);
  }
}

const CASES = [
  'empty_unary', 'large_unary', 'client_streaming', 'server_streaming', 'ping_pong',
  'empty_stream', 'timeout_on_sleeping_server', 'cancel_after_begin',
  'cancel_after_first_response', 'status_code_and_message', 'special_status_message',
  'unimplemented_method', 'unimplemented_service', 'custom_metadata',
];

const SPECIAL_MESSAGE = '\t\ntest with whitespace\r\nand Unicode BMP \u263a and non-BMP \u{1f608}\t\n';
const ECHO_INITIAL_KEY = 'x-grpc-test-echo-initial';
const ECHO_INITIAL_VALUE = 'test_initial_metadata_value';
const ECHO_TRAILING_KEY = 'x-grpc-test-echo-trailing-bin';
const ECHO_TRAILING_VALUE = Buffer.from([0xab, 0xab, 0xab]);

// ---- command line ----

function usage(message) {
  process.stderr.write(`client.js: ${message}\n` +
    'usage: node client.js --server_host H --server_port N --test_case=all|NAME[,NAME...] ' +
    '[--use_tls=false] [--server_host_override H] [--case_timeout_s S]\n' +
    `cases: ${CASES.join(',')}\n`);
  process.exit(2);
}

function parseBool(name, text) {
  const value = String(text).trim().toLowerCase();
  if (['true', '1', 'yes'].includes(value)) return true;
  if (['false', '0', 'no'].includes(value)) return false;
  return usage(`--${name}: not a boolean: ${text}`);
}

function parseArgs(argv) {
  const known = ['server_host', 'server_host_override', 'server_port', 'test_case',
    'use_tls', 'use_test_ca', 'case_timeout_s'];
  const values = {};
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([a-z_]+)(?:=(.*))?$/s.exec(argv[i]);
    if (!m || !known.includes(m[1])) usage(`unknown argument ${argv[i]}`);
    let value = m[2];
    if (value === undefined) {
      if (i + 1 >= argv.length) usage(`--${m[1]} needs a value`);
      value = argv[++i];
    }
    values[m[1]] = value;
  }
  const args = {
    host: values.server_host || 'localhost',
    hostOverride: values.server_host_override || '',
    port: Number(values.server_port),
    testCase: values.test_case || 'all',
    useTls: parseBool('use_tls', values.use_tls || 'false'),
    caseTimeoutMs: 1000 * Number(values.case_timeout_s || '10'),
  };
  parseBool('use_test_ca', values.use_test_ca || 'false');
  if (values.server_port === undefined) usage('--server_port is required');
  if (!Number.isInteger(args.port) || args.port <= 0 || args.port > 65535) usage(`bad --server_port ${values.server_port}`);
  if (!(args.caseTimeoutMs > 0)) usage(`bad --case_timeout_s ${values.case_timeout_s}`);
  if (args.useTls) usage('--use_tls=true is not supported: plaintext only');
  if (args.testCase === 'all') {
    args.selected = CASES.slice();
  } else {
    args.selected = args.testCase.split(',').map(s => s.trim()).filter(s => s);
    const unknown = args.selected.filter(s => !CASES.includes(s));
    if (unknown.length || !args.selected.length) usage(`unknown test case(s) ${unknown.join(',') || '(none given)'}`);
  }
  return args;
}

// ---- helpers ----

class CaseFailed extends Error {}

function check(condition, reason) {
  if (!condition) throw new CaseFailed(reason);
}

function zeros(n) {
  return { type: 'COMPRESSABLE', body: Buffer.alloc(n) };
}

function streamingRequest(sizes, bodySize, status) {
  const req = { response_type: 'COMPRESSABLE', response_parameters: sizes.map(size => ({ size })) };
  if (bodySize !== undefined) req.payload = zeros(bodySize);
  if (status) req.response_status = status;
  return req;
}

function bodyLength(resp) {
  return resp && resp.payload && resp.payload.body ? resp.payload.body.length : 0;
}

function isZeros(resp, n) {
  return bodyLength(resp) === n && resp.payload.body.every(b => b === 0);
}

// Watches a streaming call: its responses one at a time, its initial metadata and its
// status. The call is over once the status came and the response stream ended.
class Watch {
  constructor(call) {
    this.items = [];
    this.initial = null;
    this.status = null;
    this.ended = false;
    this.waiter = null;
    call.on('metadata', md => { this.initial = md; });
    call.on('data', msg => { this.items.push(msg); this.wake(); });
    call.on('end', () => { this.ended = true; this.wake(); });
    call.on('error', () => {}); // the status event carries it
    call.on('status', status => { this.status = status; this.wake(); });
  }

  wake() {
    const waiter = this.waiter;
    this.waiter = null;
    if (waiter) waiter();
  }

  get done() { return this.status !== null && this.ended; }

  changed() { return new Promise(resolve => { this.waiter = resolve; }); }

  // The next response, or null once the call is over.
  async next() {
    for (;;) {
      if (this.items.length) return this.items.shift();
      if (this.done) return null;
      await this.changed();
    }
  }

  // All the responses still to come.
  async rest() {
    const got = [];
    for (let msg = await this.next(); msg !== null; msg = await this.next()) got.push(msg);
    return got;
  }

  async finish() {
    while (!this.done) await this.changed();
    return this.status;
  }
}

const CODE_NAMES = {};

function describe(status) {
  return `${CODE_NAMES[status.code] || status.code} ${JSON.stringify(status.details)}`;
}

function expectStatus(what, status, code, message) {
  check(status.code === code, `${what}: want status ${CODE_NAMES[code]}, got ${describe(status)}`);
  if (message !== undefined) {
    check(status.details === message,
      `${what}: want message ${JSON.stringify(message)}, got ${JSON.stringify(status.details)}`);
  }
}

function checkEchoed(what, initial, trailing) {
  const initialValues = initial ? initial.get(ECHO_INITIAL_KEY) : [];
  check(initialValues.includes(ECHO_INITIAL_VALUE),
    `${what}: initial metadata lacks ${ECHO_INITIAL_KEY}: ${ECHO_INITIAL_VALUE} (has ${JSON.stringify(initial ? initial.toJSON() : null)})`);
  const trailingValues = trailing ? trailing.get(ECHO_TRAILING_KEY) : [];
  check(trailingValues.some(v => Buffer.isBuffer(v) && v.equals(ECHO_TRAILING_VALUE)),
    `${what}: trailing metadata lacks ${ECHO_TRAILING_KEY}: 0xababab (has ${JSON.stringify(trailing ? trailing.toJSON() : null)})`);
}

// ---- the cases ----

function makeCases(grpc, client, unimplementedClient, caseTimeoutMs) {
  const Status = grpc.status;
  let deadline = 0;

  // A unary or client-streaming call: its outcome once its status came.
  function settle(start) {
    return new Promise(resolve => {
      const out = { err: null, resp: null, initial: null, status: null };
      const call = start((err, resp) => { out.err = err; out.resp = resp; });
      call.on('metadata', md => { out.initial = md; });
      call.on('status', status => { out.status = status; resolve(out); });
    });
  }

  function unary(method, req, metadata) {
    return settle(cb => client[method](req, metadata || new grpc.Metadata(), { deadline }, cb));
  }

  async function channelStillWorks(after) {
    const { status } = await unary('EmptyCall', {});
    check(status.code === Status.OK, `EmptyCall on the same channel after ${after} failed: ${describe(status)}`);
  }

  function ok(what, out) {
    check(out.status.code === Status.OK, `${what}: ${describe(out.status)}`);
    return out.resp;
  }

  const cases = {
    async empty_unary() {
      const resp = ok('EmptyCall', await unary('EmptyCall', {}));
      check(resp !== null && typeof resp === 'object', `response is not an Empty: ${resp}`);
    },

    async large_unary() {
      const resp = ok('UnaryCall', await unary('UnaryCall',
        { response_type: 'COMPRESSABLE', response_size: 314159, payload: zeros(271828) }));
      check(isZeros(resp, 314159), `want 314159 zero bytes, got ${bodyLength(resp)} bytes`);
    },

    async client_streaming() {
      const out = await settle(cb => {
        const call = client.streamingInputCall(new grpc.Metadata(), { deadline }, cb);
        for (const n of [27182, 8, 1828, 45904]) call.write({ payload: zeros(n) });
        call.end();
        return call;
      });
      const resp = ok('StreamingInputCall', out);
      check(resp.aggregated_payload_size === 74922,
        `aggregated_payload_size ${resp.aggregated_payload_size}, want 74922`);
    },

    async server_streaming() {
      const sizes = [31415, 9, 2653, 58979];
      const watch = new Watch(client.streamingOutputCall(streamingRequest(sizes), { deadline }));
      const got = await watch.rest();
      const status = await watch.finish();
      check(status.code === Status.OK, `status ${describe(status)}`);
      check(JSON.stringify(got.map(bodyLength)) === JSON.stringify(sizes),
        `response sizes ${JSON.stringify(got.map(bodyLength))}, want ${JSON.stringify(sizes)}`);
      check(got.every((r, i) => isZeros(r, sizes[i])), 'response bodies are not zeros');
    },

    async ping_pong() {
      const pairs = [[31415, 27182], [9, 8], [2653, 1828], [58979, 45904]];
      const call = client.fullDuplexCall({ deadline });
      const watch = new Watch(call);
      for (let i = 0; i < pairs.length; i++) {
        const [respSize, bodySize] = pairs[i];
        call.write(streamingRequest([respSize], bodySize));
        const resp = await watch.next();
        if (resp === null) {
          call.cancel();
          throw new CaseFailed(`stream ended before response ${i + 1}: ${describe(watch.status)}`);
        }
        check(isZeros(resp, respSize), `response ${i + 1}: ${bodyLength(resp)} bytes, want ${respSize} zeros`);
      }
      call.end();
      const extra = await watch.rest();
      const status = await watch.finish();
      check(status.code === Status.OK, `status ${describe(status)}`);
      check(extra.length === 0, `${extra.length} responses after the fourth`);
    },

    async empty_stream() {
      const call = client.fullDuplexCall({ deadline });
      const watch = new Watch(call);
      call.end();
      const got = await watch.rest();
      const status = await watch.finish();
      check(status.code === Status.OK, `status ${describe(status)}`);
      check(got.length === 0, `${got.length} responses, want none`);
    },

    async timeout_on_sleeping_server() {
      const call = client.fullDuplexCall({ deadline: Date.now() + 1 });
      const watch = new Watch(call);
      call.write(streamingRequest([], 27182)); // and no half-close: the client waits
      expectStatus('FullDuplexCall', await watch.finish(), Status.DEADLINE_EXCEEDED);
      await channelStillWorks('the timeout');
    },

    async cancel_after_begin() {
      const out = await settle(cb => {
        const call = client.streamingInputCall(new grpc.Metadata(), { deadline }, cb);
        call.cancel();
        return call;
      });
      expectStatus('StreamingInputCall', out.status, Status.CANCELLED);
      check(out.err && out.err.code === Status.CANCELLED, 'the callback did not get CANCELLED');
      await channelStillWorks('the cancel');
    },

    async cancel_after_first_response() {
      const call = client.fullDuplexCall({ deadline });
      const watch = new Watch(call);
      call.write(streamingRequest([31415], 27182));
      const resp = await watch.next();
      check(resp !== null, `stream ended before the first response: ${watch.status && describe(watch.status)}`);
      check(bodyLength(resp) === 31415, `first response ${bodyLength(resp)} bytes, want 31415`);
      call.cancel();
      await watch.rest();
      expectStatus('FullDuplexCall', await watch.finish(), Status.CANCELLED);
      await channelStillWorks('the cancel');
    },

    async status_code_and_message() {
      const message = 'test status message';
      const out = await unary('UnaryCall',
        { response_type: 'COMPRESSABLE', response_status: { code: 2, message } });
      expectStatus('UnaryCall', out.status, Status.UNKNOWN, message);
      const call = client.fullDuplexCall({ deadline });
      const watch = new Watch(call);
      call.write(streamingRequest([], undefined, { code: 2, message }));
      call.end();
      await watch.rest();
      expectStatus('FullDuplexCall', await watch.finish(), Status.UNKNOWN, message);
    },

    async special_status_message() {
      const out = await unary('UnaryCall',
        { response_type: 'COMPRESSABLE', response_status: { code: 2, message: SPECIAL_MESSAGE } });
      expectStatus('UnaryCall', out.status, Status.UNKNOWN, SPECIAL_MESSAGE);
    },

    async unimplemented_method() {
      const out = await unary('UnimplementedCall', {});
      expectStatus('TestService/UnimplementedCall', out.status, Status.UNIMPLEMENTED);
    },

    async unimplemented_service() {
      const out = await settle(cb =>
        unimplementedClient.UnimplementedCall({}, new grpc.Metadata(), { deadline }, cb));
      expectStatus('UnimplementedService/UnimplementedCall', out.status, Status.UNIMPLEMENTED);
    },

    async custom_metadata() {
      const metadata = () => {
        const md = new grpc.Metadata();
        md.add(ECHO_INITIAL_KEY, ECHO_INITIAL_VALUE);
        md.add(ECHO_TRAILING_KEY, ECHO_TRAILING_VALUE);
        return md;
      };
      const out = await unary('UnaryCall',
        { response_type: 'COMPRESSABLE', response_size: 314159, payload: zeros(271828) }, metadata());
      const resp = ok('UnaryCall', out);
      check(bodyLength(resp) === 314159, `UnaryCall: ${bodyLength(resp)} bytes, want 314159`);
      checkEchoed('UnaryCall', out.initial, out.status.metadata);

      const call = client.fullDuplexCall(metadata(), { deadline });
      const watch = new Watch(call);
      call.write(streamingRequest([314159], 271828));
      call.end();
      const got = await watch.rest();
      const status = await watch.finish();
      check(status.code === Status.OK, `FullDuplexCall: status ${describe(status)}`);
      check(got.length === 1 && bodyLength(got[0]) === 314159,
        `FullDuplexCall: response sizes ${JSON.stringify(got.map(bodyLength))}, want [314159]`);
      checkEchoed('FullDuplexCall', watch.initial, status.metadata);
    },
  };

  return {
    async run(name) {
      deadline = Date.now() + caseTimeoutMs;
      return cases[name]();
    },
  };
}

function oneLine(text) {
  return String(text).split(/\s+/).filter(s => s).join(' ') || '(no reason)';
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const [grpc, protoLoader] = loadPackages();
  for (const [name, code] of Object.entries(grpc.status)) CODE_NAMES[code] = name;

  const definition = protoLoader.loadSync('grpc/testing/test.proto', {
    includeDirs: [PROTO_DIR], keepCase: true, longs: Number, enums: String, defaults: true,
  });
  const testing = grpc.loadPackageDefinition(definition).grpc.testing;
  const host = args.host.includes(':') ? `[${args.host}]` : args.host;
  const target = `${host}:${args.port}`;
  const options = args.hostOverride ? { 'grpc.default_authority': args.hostOverride } : {};
  const client = new testing.TestService(target, grpc.credentials.createInsecure(), options);
  const unimplementedClient = new testing.UnimplementedService(target, grpc.credentials.createInsecure(),
    { channelOverride: client.getChannel() });
  const cases = makeCases(grpc, client, unimplementedClient, args.caseTimeoutMs);

  let passed = 0;
  let failed = 0;
  for (const name of args.selected) {
    let result;
    let timer;
    const watchdog = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new CaseFailed(`case did not end within ${args.caseTimeoutMs + 2000} ms`)),
        args.caseTimeoutMs + 2000);
    });
    try {
      await Promise.race([cases.run(name), watchdog]);
      result = 'PASS';
    } catch (err) {
      result = 'FAIL ' + oneLine(err instanceof CaseFailed ? err.message : `${err.name}: ${err.message}`);
    } finally {
      clearTimeout(timer);
    }
    if (result === 'PASS') passed++; else failed++;
    console.log(`case ${name}: ${result}`);
  }
  console.log(`summary: ${passed} passed, ${failed} failed`);
  client.close();
  process.exitCode = failed === 0 ? 0 : 1;
  // Let stdout drain; do not wait on a call a broken server left hanging.
  setTimeout(() => process.exit(), 1000).unref();
}

main().catch(err => {
  process.stderr.write(`client.js: ${err && err.stack || err}\n`);
  process.exit(2);
});
