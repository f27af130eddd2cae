import { useChat } from '@ai-sdk/react';
import {
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from 'ai';
import { useState } from 'react';

// Who is signed in, and which conversation: from the page's address
// (?token=alice-token&chat=trip-1). The token goes to pai-actors serve as a bearer token,
// as the WebSocket protocol's does; the chat id is the pai thread id.
const params = new URLSearchParams(window.location.search);
const token = params.get('token') ?? '';
const chatId = params.get('chat') ?? 'chat-1';

const transport = new DefaultChatTransport({
  api: '/api/chat',
  headers: { Authorization: `Bearer ${token}` },
});

export function App() {
  const { messages, sendMessage, addToolApprovalResponse, status, error } = useChat({
    id: chatId,
    transport,
    resume: true, // go on with a run still in progress (after a reload, or a restart)
    // once every approval asked for is answered, send them: the run goes on
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const [input, setInput] = useState('');

  return (
    <main>
      <h1>Chat</h1>
      <ol aria-label="messages">
        {messages.map((message) => (
          <li key={message.id} data-role={message.role}>
            {message.parts.map((part, index) => (
              <Part
                key={index}
                part={part}
                respond={(approved) =>
                  addToolApprovalResponse({ id: part.approval.id, approved })
                }
              />
            ))}
          </li>
        ))}
      </ol>
      {error && <p role="alert">{error.message}</p>}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          if (input.trim()) {
            sendMessage({ text: input });
            setInput('');
          }
        }}
      >
        <label>
          Message <input value={input} onChange={(event) => setInput(event.target.value)} />
        </label>
        <button type="submit" disabled={status !== 'ready'}>
          Send
        </button>
      </form>
      <p data-status={status}>{status}</p>
    </main>
  );
}

function Part({ part, respond }) {
  if (part.type === 'text') {
    return <p className="text">{part.text}</p>;
  }
  if (part.type === 'reasoning') {
    return <p className="reasoning">{part.text}</p>;
  }
  if (!part.type.startsWith('tool-') && part.type !== 'dynamic-tool') {
    return null; // step-start, data-* parts: not shown here
  }
  const name = part.type === 'dynamic-tool' ? part.toolName : part.type.slice(5);
  return (
    <section className="tool" data-tool={name} data-state={part.state}>
      <h2>{name}</h2>
      <pre>{JSON.stringify(part.input)}</pre>
      {part.state === 'approval-requested' && (
        <p>
          <button onClick={() => respond(true)}>Approve</button>
          <button onClick={() => respond(false)}>Deny</button>
        </p>
      )}
      {part.state === 'output-available' && (
        <pre className="output">{JSON.stringify(part.output)}</pre>
      )}
      {part.state === 'output-error' && <p className="error">{part.errorText}</p>}
      {part.state === 'output-denied' && <p className="denied">Denied</p>}
    </section>
  );
}
