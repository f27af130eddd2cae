// The schemas of what pai_actors' UI message stream endpoint puts in a UIMessage beyond the
// AI SDK's own parts (docs/reference/ui-message-stream.md), and a helper to answer a
// pending action.
//
//   import { z } from 'zod';
//   import { paiSchemas, answerAction } from 'pai-ai-sdk';
//
//   const { dataPartSchemas, messageMetadataSchema } = paiSchemas(z, {
//     channels: { progress: z.object({ step: z.string() }) },   // the app's tool-data channels
//   });
//   const chat = new Chat({ transport, dataPartSchemas, messageMetadataSchema });
//   safeValidateUIMessages({ messages, dataSchemas: dataPartSchemas, metadataSchema: messageMetadataSchema });
//
// zod is passed in (it is the application's: the SDK's validators take its schemas), so this
// module has no dependency of its own.

/**
 * The schemas: `dataPartSchemas` (keyed by data part name, without `data-`) and
 * `messageMetadataSchema`. `channels` maps each tool-data channel of the application to the
 * schema of its items' values (a channel without one accepts any JSON value: pass
 * `z.unknown()`).
 */
export function paiSchemas(z, { channels = {} } = {}) {
  const json = z.unknown();
  const ref = z.looseObject({
    kind: z.literal('tool'),
    threadId: z.string(),
    toolName: z.string(),
    suspendName: z.string().optional(),
    messageId: z.string(),
    toolCallId: z.string(),
    runId: z.string(),
    actionId: z.string(),
    name: z.string(),
  });
  // a pending action, as the WebSocket protocol shows it (with the JSON Schema of its answer)
  const action = z.looseObject({
    name: z.string(),
    input: json,
    ref,
    resumeSchema: json,
    expiresAt: z.string().nullable(),
    originChain: z.array(json).optional(),
  });
  const suspension = z.looseObject({
    toolCallId: z.string(),
    actionId: z.string(),
    name: z.string(),
    input: json,
    suspendedAt: z.string(),
    state: z.enum(['pending', 'submitted', 'cancelled', 'failed']),
    resolvedAt: z.string().optional(),
    resume: json.optional(),
    expiresAt: z.string().optional(),
    action: action.nullable(),
  });
  const pendingAction = action.extend({
    toolCallId: z.string(),
    state: z.enum(['pending', 'resolved']),
  });
  const cancelled = z.looseObject({
    toolCallId: z.string(),
    reason: z.string().nullable(),
    at: z.string(),
  });
  const item = value =>
    z.looseObject({ toolCallId: z.string(), id: z.string(), value, updatedAt: z.string() });
  const dataPartSchemas = {
    'pai-action': pendingAction,
    'pai-suspension': suspension,
    'pai-cancelled': cancelled,
  };
  for (const [channel, value] of Object.entries(channels)) {
    if (channel.startsWith('pai-')) {
      throw new Error(`tool-data channel ${JSON.stringify(channel)}: 'pai-' names pai's own parts`);
    }
    dataPartSchemas[channel] = item(value);
  }
  const run = z.looseObject({
    runId: z.string(),
    status: z.enum(['running', 'waiting', 'completed', 'failed', 'cancelled']),
    error: z.string().nullable(),
    usage: z.record(z.string(), z.number()).optional(),
  });
  // (a user's message has none)
  const messageMetadataSchema = z
    .looseObject({
      pai: z.looseObject({ threadId: z.string(), run: run.optional() }).optional(),
      notification: json.optional(),
    })
    .optional();
  return { dataPartSchemas, messageMetadataSchema };
}

/**
 * The pending actions (`data-pai-action` and `data-pai-suspension` parts) a message shows
 * as pending: `[{actionId, threadId, name, input, resumeSchema, toolCallId, kind,
 * originChain?}]`. A sub-agent's action (a tool of the turn ran another agent) has the
 * sub-agent's `threadId` and its `originChain`; `toolCallId` is the turn's calling call.
 */
export function pendingActions(message) {
  const out = [];
  for (const part of message?.parts ?? []) {
    if (part.type === 'data-pai-suspension' && part.data.state === 'pending' && part.data.action) {
      out.push({ kind: 'suspension', ...describe(part.data.action), toolCallId: part.data.toolCallId });
    } else if (part.type === 'data-pai-action' && part.data.state === 'pending') {
      out.push({ kind: 'action', ...describe(part.data), toolCallId: part.data.toolCallId });
    }
  }
  return out;
}

function describe(action) {
  return {
    actionId: action.ref.actionId,
    threadId: action.ref.threadId,
    ...(action.originChain ? { originChain: action.originChain } : {}),
    name: action.name,
    input: action.input,
    resumeSchema: action.resumeSchema,
    expiresAt: action.expiresAt,
  };
}

/**
 * Answer a pending action with the stock chat: `chat.sendMessage(undefined, {body})` with
 * the body this returns continues the message that shows the action, and streams the rest
 * of the run. `action` is an action id, or an entry of `pendingActions(message)` (a
 * sub-agent's is then named by its thread too); `answer` is `{resume}` (the payload its
 * `resumeSchema` describes), `{cancel: reason}` or `{fail: error}`.
 */
export function answerBody(action, answer) {
  const named =
    typeof action === 'string'
      ? { actionId: action }
      : { actionId: action.actionId, threadId: action.threadId };
  return { paiActions: [{ ...named, ...answer }] };
}
