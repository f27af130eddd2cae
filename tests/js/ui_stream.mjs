// Drive pai_actors' UI message stream endpoint with the AI SDK's own classes (ai 7.x):
// DefaultChatTransport and AbstractChat, as useChat does.
//
//   node tests/js/ui_stream.mjs <base URL>
//
// tests/pai_actors/test_http_ai_sdk.py starts the server (tests/pai_actors/http_app.py) and
// runs this script. The script asks the test for what only the server side can do by
// writing one JSON line on stdout ({"op": "release"}: let a confirmed `ship` call finish;
// {"op": "release-text"}: let the `hello` step stream on after its first reasoning delta;
// {"op": "release-input"}: let the `stream` step stream its call's input after the call started;
// {"op": "restart"}: stop the server and start a new one on the same database and port) and
// reading "ok" on stdin. Its last line is {"op": "result", "failures": [...], "scenarios":
// [...], "validated": n}; a failed check is a failure, the script goes on with the next
// scenario.

import { createInterface } from 'node:readline';
import { createRequire } from 'node:module';
import { isDeepStrictEqual } from 'node:util';
import { z } from 'zod';

import { answerBody, paiSchemas, pendingActions } from '../../js/pai-ai-sdk/index.mjs';

const require = createRequire(import.meta.url);
const {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
  safeValidateUIMessages,
} = require('ai7');

const BASE = process.argv[2];
const ALICE = 'alice-token';
const BOB = 'bob-token';
const { dataPartSchemas, messageMetadataSchema } = paiSchemas(z, {
  channels: { progress: z.object({ step: z.string() }) },
});

// -- talking to the test ---------------------------------------------------------------------

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function ask(op) {
  process.stdout.write(JSON.stringify({ op }) + '\n');
  const { value, done } = await lines.next();
  if (done || value.trim() !== 'ok') throw new Error(`the test answered ${value} to ${op}`);
}

// -- a chat as useChat makes one ---------------------------------------------------------------

class State {
  constructor(messages = []) {
    this.messages = messages;
    this.status = 'ready';
    this.error = undefined;
  }
  pushMessage = message => {
    this.messages = [...this.messages, message];
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  };
  snapshot = thing => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor({ messages, ...options }) {
    super({ ...options, state: new State(messages) });
  }
}

const streams = []; // every response body the endpoint sent: [{url, chunks}]

// fetch, recording each UI message stream's chunks as the SDK reads them
async function recordingFetch(url, init) {
  const response = await fetch(url, init);
  if (!response.headers.get('content-type')?.startsWith('text/event-stream')) return response;
  const [mine, theirs] = response.body.tee();
  const record = { url: String(url), chunks: [], header: response.headers.get('x-vercel-ai-ui-message-stream') };
  streams.push(record);
  (async () => {
    const reader = mine.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (event.startsWith('data: ') && event !== 'data: [DONE]') {
          record.chunks.push(JSON.parse(event.slice(6)));
        }
      }
    }
  })();
  return new Response(theirs, { status: response.status, headers: response.headers });
}

// DefaultChatTransport keeping every chunk of its response streams as the SDK parsed them
// (parseJsonEventStream against uiMessageChunkSchema: a chunk the schema refuses fails the
// chat), in the order AbstractChat reads them
class ChunkRecordingTransport extends DefaultChatTransport {
  chunks = [];
  processResponseStream(stream) {
    const record = new TransformStream({
      transform: (chunk, controller) => {
        this.chunks.push(structuredClone(chunk));
        controller.enqueue(chunk);
      },
    });
    return super.processResponseStream(stream).pipeThrough(record);
  }
}

function transport(token = ALICE, Transport = DefaultChatTransport) {
  return new Transport({
    api: `${BASE}/api/chat`,
    headers: { Authorization: `Bearer ${token}` },
    fetch: recordingFetch,
  });
}

const chats = [];

function newChat(id, messages = [], chatTransport = transport()) {
  const chat = new Chat({
    id,
    messages,
    transport: chatTransport,
    dataPartSchemas,
    messageMetadataSchema,
    sendAutomaticallyWhen: async options =>
      lastAssistantMessageIsCompleteWithApprovalResponses(options) ||
      lastAssistantMessageIsCompleteWithToolCalls(options),
    onError: error => console.error(`chat ${id}: ${error.stack ?? error}`),
  });
  chats.push(chat);
  return chat;
}

async function waitFor(what, condition) {
  // network effects only (a response read by the SDK's tasks): bounded by the test's timeout
  for (let i = 0; i < 2000; i++) {
    if (condition()) return;
    await new Promise(resolve => setTimeout(resolve, 5));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const idle = chat => () => chat.status === 'ready' || chat.status === 'error';
const last = chat => chat.messages[chat.messages.length - 1];
const partsOf = (chat, type) => last(chat).parts.filter(part => part.type === type);
const toolPart = (chat, name) => last(chat).parts.find(part => part.type === `tool-${name}`);
const chunksOf = (record, type) => record.chunks.filter(chunk => chunk.type === type);

function check(condition, message, detail) {
  if (!condition) {
    throw new Error(`${message}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
  }
}

// -- the scenarios ------------------------------------------------------------------------------

async function text() {
  const chat = newChat('http-text');
  const before = streams.length;
  const sent = chat.sendMessage({ text: 'hello' });
  await waitFor('the first reasoning', () => streams[before]?.chunks.some(c => c.type === 'reasoning-delta'));
  await ask('release-text');  // the model goes on: every later delta arrives on its own
  await sent;
  const record = streams[before];
  check(record.header === 'v1', 'the x-vercel-ai-ui-message-stream header', record.header);
  check(chunksOf(record, 'text-delta').length === 3, 'text streams delta by delta', record.chunks);
  check(chunksOf(record, 'reasoning-delta').length === 2, 'reasoning streams too', record.chunks);
  check(chunksOf(record, 'text-delta')[0].delta === 'Hello ', 'the first token', record.chunks);
  check(chunksOf(record, 'finish').length === 1, 'the stream finishes', record.chunks);
  const message = last(chat);
  check(message.role === 'assistant', 'an assistant message', message);
  check(message.parts[0].type === 'step-start', 'the message starts with step-start', message);
  check(partsOf(chat, 'text')[0]?.text === 'Hello there, friend.', 'the text', message);
  check(partsOf(chat, 'reasoning')[0]?.text === 'Thinking.', 'the reasoning', message);
  check(message.metadata?.pai?.run?.status === 'completed', 'the run in the metadata', message);
}

async function approval(approved) {
  const chat = newChat(approved ? 'http-approve' : 'http-deny');
  await chat.sendMessage({ text: 'pay 3' });
  const part = toolPart(chat, 'pay');
  check(part?.state === 'approval-requested', 'the approval is requested', last(chat));
  const [action] = pendingActions(last(chat));
  check(action?.actionId === part.approval.id, 'the approval as a pending pai-action', last(chat));
  check(action.resumeSchema?.required?.[0] === 'approved', 'its resume schema', action);
  await chat.addToolApprovalResponse({ id: part.approval.id, approved, reason: approved ? undefined : 'too much' });
  await waitFor('the answer streamed', () => idle(chat)() && partsOf(chat, 'text').length > 0);
  const after = toolPart(chat, 'pay');
  if (approved) {
    check(after.state === 'output-available', 'the approved call ran', after);
    check(after.output?.paid === 3, 'its output', after);
  } else {
    check(after.state === 'output-denied', 'the denied call', after);
    check(after.approval?.approved === false, 'the denial kept', after);
  }
  check(partsOf(chat, 'step-start').length === 2, 'one message, two steps', last(chat));
  check(partsOf(chat, 'text')[0].text === 'done', 'the model goes on', last(chat));
  const resolved = partsOf(chat, 'data-pai-action')[0];
  check(resolved?.data.state === 'resolved', 'the pai-action is resolved', resolved);
  check(chat.messages.length === 2, 'a user and one assistant message', chat.messages);
}

async function toolInput() {
  // `stream`: the model streams the input of a `pay` call (which needs approval) in fragments,
  // once the test lets it go on after the call started
  const sdk = transport(ALICE, ChunkRecordingTransport);
  const chat = newChat('http-tool-input', [], sdk);
  const held = []; // the pay part as the chat's state held it after each chunk
  const { pushMessage, replaceMessage } = chat.state;
  const hold = message => {
    const part = message.parts.find(p => p.type === 'tool-pay');
    if (part) held.push(structuredClone(part));
  };
  chat.state.pushMessage = message => (hold(message), pushMessage(message));
  chat.state.replaceMessage = (index, message) => (hold(message), replaceMessage(index, message));
  const sent = chat.sendMessage({ text: 'stream' });
  await waitFor('the call started', () => sdk.chunks.some(c => c.type === 'tool-input-start'));
  await ask('release-input');  // the model goes on: every fragment arrives on its own
  await sent;
  const chunks = sdk.chunks;
  const start = chunks.findIndex(c => c.type === 'tool-input-start' && c.toolName === 'pay');
  check(start >= 0, 'the call starts with tool-input-start', chunks);
  const { toolCallId } = chunks[start];
  const available = chunks.findIndex(c => c.type === 'tool-input-available' && c.toolCallId === toolCallId);
  check(available > start, 'then tool-input-available', chunks);
  const deltas = chunks
    .map((chunk, index) => ({ chunk, index }))
    .filter(({ chunk }) => chunk.type === 'tool-input-delta' && chunk.toolCallId === toolCallId);
  check(deltas.length >= 2, 'the input streams delta by delta', chunks);
  check(deltas.every(({ index }) => start < index && index < available), 'every delta between the two', chunks);
  const typed = deltas.map(({ chunk }) => chunk.inputTextDelta).join('');
  const input = chunks[available].input;
  check(isDeepStrictEqual(input, { amount: 2.5 }), 'the input the model called with', chunks[available]);
  let parsed;
  try {
    parsed = JSON.parse(typed);
  } catch (error) {
    check(false, `the deltas joined are JSON (${error.message})`, typed);
  }
  check(isDeepStrictEqual(parsed, input), 'the deltas joined are the input', { typed, input });
  const streaming = held.filter(part => part.state === 'input-streaming');
  check(streaming.length === deltas.length + 1, 'the SDK held the part streaming after each chunk', held);
  check(streaming.at(-1).rawInput === typed, 'with the text typed so far', streaming.at(-1));
  check(isDeepStrictEqual(streaming.at(-1).input, input), 'parsed as partial JSON', streaming.at(-1));
  const order = [...new Set(held.map(part => part.state))];
  check(
    isDeepStrictEqual(order, ['input-streaming', 'input-available', 'approval-requested']),
    'streaming, then its input, then the approval',
    order,
  );
  const part = toolPart(chat, 'pay');
  check(part?.state === 'approval-requested', 'the approval is requested', last(chat));
  check(isDeepStrictEqual(part.input, input), "the message's tool part has the input", part);
  await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
  await waitFor('the answer streamed', () => idle(chat)() && partsOf(chat, 'text').length > 0);
  const after = toolPart(chat, 'pay');
  check(after.state === 'output-available' && after.output?.paid === 2.5, 'the approved call ran', after);
  check(isDeepStrictEqual(after.input, input), 'its input kept', after);
  check(partsOf(chat, 'text')[0].text === 'done', 'the model goes on', last(chat));
  check(chat.messages.length === 2, 'a user and one assistant message', chat.messages);
}

async function clientTool() {
  const chat = newChat('http-ask');
  await chat.sendMessage({ text: 'ask colour' });
  const part = toolPart(chat, 'ask');
  check(part?.state === 'input-available', 'the client tool waits for its output', last(chat));
  check(part.input?.question === 'colour', 'its input', part);
  await chat.addToolOutput({ tool: 'ask', toolCallId: part.toolCallId, output: { answer: 'blue' } });
  await waitFor('the rest of the run', () => idle(chat)() && partsOf(chat, 'text').length > 0);
  const after = toolPart(chat, 'ask');
  check(after.state === 'output-available' && after.output?.answer === 'blue', 'the output', after);
  check(partsOf(chat, 'text')[0].text === 'done', 'the model goes on', last(chat));
}

async function suspension() {
  const chat = newChat('http-ship');
  await chat.sendMessage({ text: 'ship box' });
  const [action] = pendingActions(last(chat));
  check(action?.kind === 'suspension' && action.name === 'ship.confirm', 'the named suspension', last(chat));
  check(action.resumeSchema?.properties?.approved?.type === 'boolean', 'its resume schema', action);
  const drafted = partsOf(chat, 'data-progress')[0];
  check(drafted?.data.value.step === 'drafted', 'the stored tool data as data-progress', drafted);
  const seen = [];
  chat.onData = part => seen.push(part);
  const sent = chat.sendMessage(undefined, { body: answerBody(action.actionId, { resume: { approved: true } }) });
  await waitFor('the transient progress', () => seen.some(p => p.transient && p.data.value.step === 'packing'));
  await ask('release');
  await sent;
  const part = toolPart(chat, 'ship');
  check(part.state === 'output-available' && part.output.shipped === 'box', 'the call finished', part);
  const status = partsOf(chat, 'data-progress').find(p => p.id.endsWith(':status'));
  check(status?.data.value.step === 'shipped', 'the data part updated in place', last(chat).parts);
  const episode = partsOf(chat, 'data-pai-suspension')[0];
  check(episode.data.state === 'submitted' && episode.data.action === null, 'the episode', episode);
  check(!last(chat).parts.some(p => p.transient), 'transient data is never in the message', last(chat));
}

async function restart() {
  const first = newChat('http-restart');
  await first.sendMessage({ text: 'ship crate' });
  const [action] = pendingActions(last(first));
  check(action?.name === 'ship.confirm', 'the run waits', last(first));
  await ask('restart');

  // a new page: the messages from the server, then resume
  const headers = { Authorization: `Bearer ${ALICE}`, 'content-type': 'application/json' };
  const stored = await (await fetch(`${BASE}/api/chat/http-restart/messages`, { headers })).json();
  const chat = newChat('http-restart', stored.messages);
  const nothing = await fetch(`${BASE}/api/chat/http-restart/stream`, { headers });
  check(nothing.status === 204, 'nothing to resume while the run waits', nothing.status);
  const answered = await fetch(`${BASE}/api/chat/http-restart/actions/${encodeURIComponent(action.actionId)}`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ resume: { approved: true } }),
  });
  check(answered.status === 200, 'the answer is accepted', await answered.clone().text());
  const resumed = chat.resumeStream();
  await waitFor('the resumed stream', () => streams.some(s => s.url.endsWith('/stream') && s.chunks.length > 0));
  await ask('release');
  await resumed;
  const part = toolPart(chat, 'ship');
  check(part?.state === 'output-available' && part.output.shipped === 'crate', 'the resumed run finished', last(chat));
  check(partsOf(chat, 'text')[0]?.text === 'done', 'and the model went on', last(chat));
  check(chat.messages.length === 2, 'the replay replaced the message', chat.messages);
  check(chat.messages[1].metadata?.pai?.run?.status === 'completed', 'the run completed', chat.messages[1]);
}

async function scope() {
  const bob = await fetch(`${BASE}/api/chat/http-text/messages`, { headers: { Authorization: `Bearer ${BOB}` } });
  check(bob.status === 404, "another scope's chat does not exist", bob.status);
  const none = await fetch(`${BASE}/api/chat/http-text/messages`);
  check(none.status === 401, 'no token, no answer', none.status);
  const stream = await fetch(`${BASE}/api/chat/http-text/stream`, { headers: { Authorization: `Bearer ${BOB}` } });
  check(stream.status === 204, "nor its stream: nothing to resume, as for a new chat", stream.status);
}

// -- validation -------------------------------------------------------------------------------

async function validateAll() {
  const headers = { Authorization: `Bearer ${ALICE}` };
  const lists = chats.map(chat => ({ id: `chat ${chat.id}`, messages: chat.messages }));
  for (const id of new Set(chats.map(chat => chat.id))) {
    const stored = await (await fetch(`${BASE}/api/chat/${id}/messages`, { headers })).json();
    lists.push({ id: `stored ${id}`, messages: stored.messages });
  }
  let validated = 0;
  const failures = [];
  for (const { id, messages } of lists) {
    for (const schemas of [{}, { dataSchemas: dataPartSchemas, metadataSchema: messageMetadataSchema }]) {
      const result = await safeValidateUIMessages({ messages, ...schemas });
      validated += messages.length;
      if (!result.success) {
        failures.push(`${id} (${Object.keys(schemas).length ? 'pai schemas' : 'stock'}): ${result.error.message}`);
      }
    }
  }
  return { validated, failures };
}

const scenarios = {
  text,
  approval: () => approval(true),
  denial: () => approval(false),
  toolInput,
  clientTool,
  suspension,
  restart,
  scope,
};
const failures = [];
for (const [name, scenario] of Object.entries(scenarios)) {
  try {
    await scenario();
  } catch (error) {
    failures.push(`${name}: ${error.stack ?? error}`);
  }
}
let validated = 0;
try {
  const report = await validateAll();
  validated = report.validated;
  failures.push(...report.failures.map(f => `validation: ${f}`));
} catch (error) {
  failures.push(`validation: ${error.stack ?? error}`);
}
process.stdout.write(
  JSON.stringify({ op: 'result', failures, scenarios: Object.keys(scenarios), validated }) + '\n',
);
process.exit(0);
