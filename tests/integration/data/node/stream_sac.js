// Single active consumer hand-over with rabbitmq-stream-js-client, run by
// tests/integration/test_stream_protocol/test_stream_sac_node.py.
// Input: one JSON argument {port, stream, mode, first, stopAfter, second}:
//   mode "unsubscribe": both consumers share one client (one pooled connection); the active
//                      one leaves with client.closeConsumer() (Unsubscribe);
//   mode "close":       each consumer has its own client; the active one's client closes
//                      (Close, then TCP end).
// `first` messages are published, the first consumer stores every offset it handles and is
// stopped once it has handled `stopAfter` of them (all, or mid-backlog), then `second` more
// are published. The second consumer, once activated, resumes at the stored offset + 1 (what
// its ConsumerUpdate listener answers).
// Output: one JSON line {first, second, stored, updates} that the Python test checks.
'use strict';

const rabbit = require('rabbitmq-stream-js-client');

const cfg = JSON.parse(process.argv[2]);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function connect() {
  return rabbit.connect({
    hostname: '127.0.0.1',
    port: cfg.port,
    username: 'guest',
    password: 'guest',
    vhost: '/',
  });
}

async function waitFor(check, ms) {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await sleep(20);
  }
  return true;
}

async function publish(client, from, to) {
  const pub = await client.declarePublisher({ stream: cfg.stream });
  for (let i = from; i < to; i++) await pub.send(Buffer.from(`m${i}`));
  await pub.flush();
  await client.deletePublisher(pub.extendedId);
}

async function main() {
  const main = await connect();
  await main.createStream({ stream: cfg.stream });
  await publish(main, 0, cfg.first);

  const first = [];
  const second = [];
  const updates = [];
  let stored = -1;
  let leaving = false;
  const c1Client = main;
  const c2Client = cfg.mode === 'close' ? await connect() : main;

  const c1 = await c1Client.declareConsumer(
    {
      stream: cfg.stream,
      offset: rabbit.Offset.first(),
      singleActive: true,
      consumerRef: 'grp',
      consumerUpdateListener: async () => {
        updates.push('c1');
        return rabbit.Offset.first();
      },
    },
    async (msg) => {
      first.push(Number(msg.offset));
      if (leaving) return; // the test stopped this consumer: it handles nothing more
      stored = Number(msg.offset);
      await c1.storeOffset(msg.offset);
    },
  );
  const c2 = await c2Client.declareConsumer(
    {
      stream: cfg.stream,
      offset: rabbit.Offset.first(),
      singleActive: true,
      consumerRef: 'grp',
      consumerUpdateListener: async (ref, stream) => {
        updates.push('c2');
        try {
          const offset = await c2Client.queryOffset({ reference: ref, stream });
          return rabbit.Offset.offset(offset + 1n);
        } catch (e) {
          return rabbit.Offset.first();
        }
      },
    },
    (msg) => second.push(Number(msg.offset)),
  );

  if (!(await waitFor(() => first.length >= cfg.stopAfter, 10000))) {
    throw new Error(`first consumer got ${first.length} of ${cfg.stopAfter}`);
  }
  if (cfg.stopAfter >= cfg.first) await sleep(300); // the waiting one must get nothing meanwhile
  const secondBefore = second.length;
  leaving = true;

  if (cfg.mode === 'close') {
    await c1Client.close();
    await publish(c2Client, cfg.first, cfg.first + cfg.second);
  } else {
    await main.closeConsumer(c1.extendedId);
    await publish(main, cfg.first, cfg.first + cfg.second);
  }
  const total = cfg.first + cfg.second;
  await waitFor(() => second.length > 0 && second[second.length - 1] >= total - 1, 15000);

  if (cfg.mode === 'close') await c2Client.close();
  else await main.closeConsumer(c2.extendedId);
  if (cfg.mode === 'close') {
    const cleanup = await connect();
    await cleanup.deleteStream({ stream: cfg.stream });
    await cleanup.close();
  } else {
    await main.deleteStream({ stream: cfg.stream });
    await main.close();
  }
  console.log(JSON.stringify({ first, second, secondBefore, stored, updates }));
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error('FAIL', e);
    process.exit(1);
  },
);
