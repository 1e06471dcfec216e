// Direct reply-to with amqplib, written as its tutorial's RPC: the client consumes
// amq.rabbitmq.reply-to with noAck and publishes requests with that reply-to; a server on
// another connection answers to the reply-to it receives, through a confirm channel.
// Input: one JSON argument {url, queue, n}. Output: one JSON line {replies, replyTo}.
'use strict';

const amqp = require('amqplib');

const cfg = JSON.parse(process.argv[2]);
const RT = 'amq.rabbitmq.reply-to';

async function main() {
  const serverConn = await amqp.connect(cfg.url);
  const serverCh = await serverConn.createConfirmChannel();
  await serverCh.assertQueue(cfg.queue, { exclusive: true });
  let replyTo = null;
  await serverCh.consume(cfg.queue, (msg) => {
    replyTo = msg.properties.replyTo;
    const answer = String(Number(msg.content.toString()) * 2);
    serverCh.sendToQueue(msg.properties.replyTo, Buffer.from(answer), {
      correlationId: msg.properties.correlationId,
      mandatory: true,
    });
    serverCh.ack(msg);
  });

  const clientConn = await amqp.connect(cfg.url);
  const clientCh = await clientConn.createChannel();
  const replies = {};
  const done = new Promise((resolve) => {
    clientCh.consume(RT, (msg) => {
      replies[msg.properties.correlationId] = msg.content.toString();
      if (Object.keys(replies).length === cfg.n) resolve();
    }, { noAck: true });
  });
  for (let i = 0; i < cfg.n; i++) {
    clientCh.sendToQueue(cfg.queue, Buffer.from(String(i)), { replyTo: RT, correlationId: `c${i}` });
  }
  await done;
  await serverCh.waitForConfirms();
  await clientConn.close();
  await serverConn.close();
  console.log(JSON.stringify({ replies, replyTo }));
}

main().catch((err) => { console.error(err); process.exit(1); });
