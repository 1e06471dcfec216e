// The client scenario of tests/integration/test_clients/client_scenario.py, done with amqplib.
// Input: one JSON argument {url, exchange, queue, messages, nA, nTotal, prefetch, quietMs}.
// Output: one JSON line {splitTs, results: {case: [delivery, ...]}} that the Python test checks.
'use strict';

const amqp = require('amqplib');

const cfg = JSON.parse(process.argv[2]);
const RK = 'rk';
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function props(spec) {
  return {
    contentType: spec.content_type,
    messageId: spec.message_id,
    correlationId: spec.correlation_id,
    timestamp: spec.timestamp,
    priority: spec.priority,
    deliveryMode: spec.delivery_mode,
    headers: spec.headers,
    mandatory: true,
  };
}

async function publish(ch, specs) {
  for (const spec of specs) {
    ch.publish(cfg.exchange, RK, Buffer.from(spec.body), props(spec));
  }
  await ch.waitForConfirms();
}

function normalise(msg) {
  const p = msg.properties;
  const headers = Object.assign({}, p.headers || {});
  const offset = headers['x-stream-offset'];
  delete headers['x-stream-offset'];
  return {
    body: msg.content.toString('utf8'),
    exchange: msg.fields.exchange,
    routing_key: msg.fields.routingKey,
    redelivered: msg.fields.redelivered,
    offset: offset,
    properties: {
      content_type: p.contentType,
      message_id: p.messageId,
      correlation_id: p.correlationId,
      timestamp: p.timestamp,
      priority: p.priority,
      delivery_mode: p.deliveryMode,
      headers: headers,
    },
  };
}

async function consume(conn, pub, offset, count, after) {
  const ch = await conn.createChannel();
  await ch.prefetch(cfg.prefetch);
  const got = [];
  const ok = await ch.consume(
    cfg.queue,
    (msg) => {
      got.push(normalise(msg));
      ch.ack(msg);
    },
    { arguments: { 'x-stream-offset': offset } },
  );
  await publish(pub, after);
  const deadline = Date.now() + 10000;
  let reached = null;
  for (;;) {
    const now = Date.now();
    if (got.length >= count) {
      if (reached === null) reached = now;
      if (now - reached >= cfg.quietMs) break;
    } else if (now > deadline) {
      break;
    }
    await sleep(50);
  }
  await ch.cancel(ok.consumerTag);
  await ch.close();
  return got;
}

async function main() {
  const conn = await amqp.connect(cfg.url);
  const pub = await conn.createConfirmChannel();
  await pub.assertExchange(cfg.exchange, 'direct', { durable: true });
  await pub.assertQueue(cfg.queue, { durable: true, arguments: { 'x-queue-type': 'stream' } });
  await pub.bindQueue(cfg.queue, cfg.exchange, RK);
  const m = cfg.messages;
  await publish(pub, m.slice(0, cfg.nA));
  const splitTs = Math.floor(Date.now() / 1000) + 1;
  await sleep(splitTs * 1000 - Date.now() + 50);
  await publish(pub, m.slice(cfg.nA, cfg.nTotal - 1));
  await publish(pub, m.slice(cfg.nTotal - 1, cfg.nTotal));
  const results = {};
  results.first = await consume(conn, pub, 'first', cfg.nTotal, []);
  const seventh = results.first.length > 7 ? results.first[7].offset : 7;
  results.offset = await consume(conn, pub, seventh, cfg.nTotal - 7, []);
  results.last = await consume(conn, pub, 'last', 1, []);
  results.timestamp = await consume(
    conn,
    pub,
    { '!': 'timestamp', value: splitTs },
    cfg.nTotal - cfg.nA,
    [],
  );
  results.interval = await consume(conn, pub, '1h', cfg.nTotal, []);
  results.next = await consume(conn, pub, 'next', 1, m.slice(cfg.nTotal, cfg.nTotal + 1));
  await conn.close();
  process.stdout.write(`${JSON.stringify({ splitTs, results })}\n`);
}

main().catch((err) => {
  process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
