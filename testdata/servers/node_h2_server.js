// A Node HTTP/2 server (TLS, ALPN h2 and http/1.1) for realservers_test.go.
// Usage:
//   node node_h2_server.js PEM MAX_STREAMS REQUESTS_PER_SESSION IDLE_MS
// PEM holds the certificate and its key. The server allows MAX_STREAMS
// concurrent streams per session, ends a session gracefully (GOAWAY) after
// REQUESTS_PER_SESSION requests (0: never), and destroys a session idle for
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
  if (req.stream && perSession > 0) {
    const s = req.stream.session;
    s.served = (s.served || 0) + 1;
    if (s.served === perSession) setImmediate(() => s.close());
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
