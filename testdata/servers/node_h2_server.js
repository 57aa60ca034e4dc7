// A Node HTTP/2 server (TLS, ALPN h2 and http/1.1) for realservers_test.go.
// Usage:
//   node node_h2_server.js PEM MAX_STREAMS REQUESTS_PER_SESSION IDLE_MS
// PEM holds the certificate and its key. The server allows MAX_STREAMS
// concurrent streams per session, ends a session gracefully (GOAWAY, then
// close 200 ms later) after REQUESTS_PER_SESSION requests (0: never), and destroys a session idle for
// IDLE_MS (0: never) without a GOAWAY. It listens on 127.0.0.1 on a free
// port and prints "READY <port>".
// Paths are /<kind>/<id>; every request with a body is read in full first.
//   get, post  answer the id
//   flush      the head at once, the body (the id) 20 ms later
//   slow       answer the id after 30 ms
//   big        answer 256 KiB: the id, then dots
//   upload     answer the id, the body's length and its byte sum mod 2^32
//   rst        reset the stream (HTTP/2) or destroy the socket (HTTP/1.1)
//              without answering
// Every POST id is counted; GET /counts answers the counts as JSON.
'use strict';
const common = require('./common.js');
const http2 = require('http2');
const fs = require('fs');
const pem = fs.readFileSync(process.argv[2]);
const maxStreams = Number(process.argv[3] || 100);
const perSession = Number(process.argv[4] || 0);
const idleMs = Number(process.argv[5] || 0);

const server = http2.createSecureServer({
  key: pem, cert: pem, allowHTTP1: true,
  settings: { maxConcurrentStreams: maxStreams },
}, common.handler((req, res, kind, id, size, sum) => {
  const s = req.stream && req.stream.session; // none once the stream is destroyed
  if (s && perSession > 0) {
    s.served = (s.served || 0) + 1;
    // close() alone marks the session closed and sends GOAWAY; a request
    // nghttp2 took in before that GOAWAY left is then refused from
    // JavaScript inside nghttp2's own read, which corrupts Node's heap
    // (Node 20: "corrupted double-linked list", 1 run in 40). So, as
    // RFC 9113 §6.8 suggests for a graceful shutdown, a first GOAWAY
    // with the largest stream ID stops the client opening streams while
    // every stream it opened meanwhile is still served; close() sends
    // the final one 200 ms later.
    if (s.served === perSession) {
      setImmediate(() => {
        if (!s.closed && !s.destroyed) s.goaway(http2.constants.NGHTTP2_NO_ERROR, 2 ** 31 - 1);
        setTimeout(() => { if (!s.closed && !s.destroyed) s.close(); }, 200);
      });
    }
  }
  switch (kind) {
    case 'get':
    case 'post':
      res.end(id);
      break;
    case 'flush':
      res.writeHead(200);
      res.write('');
      setTimeout(() => res.end(id), 20);
      break;
    case 'slow':
      setTimeout(() => res.end(id), 30);
      break;
    case 'big':
      res.end(id + '.'.repeat(256 * 1024 - id.length));
      break;
    case 'upload':
      res.end(id + ' ' + size + ' ' + sum);
      break;
    case 'rst':
      if (req.stream) req.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
      else req.socket.destroy();
      break;
    default:
      res.statusCode = 404;
      res.end('no such kind');
  }
}));
server.on('sessionError', (e) => process.stderr.write('sessionError ' + e + '\n'));
server.on('session', (s) => {
  s.on('error', (e) => process.stderr.write('session error ' + e + '\n'));
  s.on('frameError', (type, code, id) => process.stderr.write('frameError ' + type + ' ' + code + ' ' + id + '\n'));
  s.on('close', () => { if (s.served !== undefined && s.served < perSession) process.stderr.write('closed after ' + s.served + '\n'); });
});
if (idleMs > 0) {
  server.on('session', (s) => s.setTimeout(idleMs, () => s.destroy()));
}
server.listen(0, '127.0.0.1', () => {
  process.stdout.write('READY ' + server.address().port + '\n');
});
process.on('SIGTERM', () => process.exit(0));
