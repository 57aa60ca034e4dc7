// A Node http server for realservers_test.go. Usage:
//   node node_server.js KEEP_ALIVE_TIMEOUT_MS MAX_REQUESTS_PER_SOCKET
// It listens on 127.0.0.1 on a free port and prints "READY <port>".
// Paths are /<kind>/<id>; every request with a body is read in full first.
//   get, post  answer the id (body and X-Id)
//   flush      flushHeaders() at once, the body (the id) 20 ms later
//   flushclose the same with "Connection: close": the server closes after it
//   slow       answer the id after 30 ms
//   destroy    destroy the socket without answering (mid-request)
//   cut        flushHeaders() with a Content-Length, then destroy the socket
//   upload     answer the id, the body's length and its byte sum mod 2^32
//   stall      the first request for an id is held (until /release/<id>);
//              later ones are answered at once, with "X-Copy: 1"
//   held       "held" if the held request for the id is still open, "gone"
//              if its connection closed first, "none" if there is none
//   release    answer the held request for the id, if it is still open
// Every POST id is counted; GET /counts answers the counts as JSON.
'use strict';
const common = require('./common.js');
const http = require('http');
const keepAliveMs = Number(process.argv[2] || 5000);
const maxPerSocket = Number(process.argv[3] || 0);
const stalled = new Map(); // id -> {res, gone}

const server = http.createServer(common.handler((req, res, kind, id, size, sum) => {
  switch (kind) {
    case 'get':
    case 'post':
      res.setHeader('X-Id', id);
      res.end(id);
      break;
    case 'flush':
      res.setHeader('X-Id', id);
      res.flushHeaders();
      setTimeout(() => res.end(id), 20);
      break;
    case 'flushclose':
      res.setHeader('X-Id', id);
      res.setHeader('Connection', 'close');
      res.flushHeaders();
      setTimeout(() => res.end(id), 20);
      break;
    case 'slow':
      setTimeout(() => { res.setHeader('X-Id', id); res.end(id); }, 30);
      break;
    case 'upload':
      res.setHeader('X-Id', id);
      res.end(id + ' ' + size + ' ' + sum);
      break;
    case 'stall': {
      if (!stalled.has(id)) {
        const h = { res, gone: false };
        res.on('close', () => { if (!res.writableEnded) h.gone = true; });
        stalled.set(id, h);
        break;
      }
      res.setHeader('X-Id', id);
      res.setHeader('X-Copy', '1');
      res.end(id);
      break;
    }
    case 'held': {
      const h = stalled.get(id);
      res.end(!h ? 'none' : h.gone ? 'gone' : 'held');
      break;
    }
    case 'release': {
      const h = stalled.get(id);
      if (h && !h.gone && !h.res.writableEnded) {
        h.res.setHeader('X-Id', id);
        h.res.end(id);
      }
      res.end('ok');
      break;
    }
    case 'destroy':
      req.socket.destroy();
      break;
    case 'cut':
      res.setHeader('X-Id', id);
      res.setHeader('Content-Length', String(id.length + 100));
      res.flushHeaders();
      setTimeout(() => req.socket.destroy(), 5);
      break;
    default:
      res.statusCode = 404;
      res.end('no such kind');
  }
}));
server.keepAliveTimeout = keepAliveMs;
if (maxPerSocket > 0) server.maxRequestsPerSocket = maxPerSocket;
server.on('dropRequest', () => { process.stderr.write('dropRequest (503)\n'); });
server.listen(0, '127.0.0.1', () => {
  process.stdout.write('READY ' + server.address().port + '\n');
});
process.on('SIGTERM', () => process.exit(0));
