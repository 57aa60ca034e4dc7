// What the Node test servers share (node_server.js, node_h2_server.js):
// reading a request's body, counting POSTs, and parsing /<kind>/<id>.
'use strict';

// handler returns a request handler that reads each request's body in
// full, answers GET /counts with the POST counts as JSON and any other
// path than /<kind>/<id> with 404, counts each POST id, and then calls
// serve(req, res, kind, id, size, sum): the body's length and byte sum
// mod 2^32.
exports.handler = (serve) => {
  const posts = new Map();
  return (req, res) => {
    let size = 0, sum = 0;
    req.on('data', (chunk) => {
      size += chunk.length;
      for (const b of chunk) sum = (sum + b) >>> 0;
    });
    req.on('end', () => {
      if (req.url === '/counts') {
        res.setHeader('Content-Type', 'application/json');
        res.end(JSON.stringify(Object.fromEntries(posts)));
        return;
      }
      const m = /^\/([a-z]+)\/([^/?]+)$/.exec(req.url);
      if (!m) {
        res.statusCode = 404;
        res.end('no such path');
        return;
      }
      const kind = m[1], id = m[2];
      if (req.method === 'POST') posts.set(id, (posts.get(id) || 0) + 1);
      serve(req, res, kind, id, size, sum);
    });
  };
};
