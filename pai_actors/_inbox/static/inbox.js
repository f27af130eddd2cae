// The pai_actors inbox: the pending actions of the signed-in person's scope, live.
//
// Plain JavaScript, no build step. Every request carries "Authorization: Bearer <token>"
// (the token is kept in sessionStorage, so it is forgotten with the tab). The live feed is
// the server-sent event stream at api/events, read with fetch() because EventSource cannot
// send that header. Each action gets a form generated from its resume JSON Schema, checked
// here before it is sent; the server checks it again, and its rejection is shown next to the
// field it names. Every value from the server is rendered as text, never as HTML.
"use strict";

(() => {
  const TOKEN_KEY = "pai_actors.inbox.token";
  const SIMPLE_TYPES = ["string", "number", "integer", "boolean"];

  let token = null;
  let stream = null; // the AbortController of the running event stream
  let requestId = 0;
  let counter = 0;
  const cards = new Map(); // action key -> its <li>
  const resolved = new Set(); // keys of the actions this page resolved

  const $ = (id) => document.getElementById(id);
  const newId = (prefix) => `${prefix}-${++counter}`;
  const keyOf = (action) => `${action.ref.threadId}\u0000${action.ref.actionId}`;

  function el(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  // -- talking to the server --------------------------------------------------------------

  function api(path, options = {}) {
    const headers = new Headers(options.headers || {});
    headers.set("Authorization", `Bearer ${token}`);
    return fetch(path, { ...options, headers, cache: "no-store" });
  }

  // Send a protocol request (submitAction, cancelAction, failAction); {ok, error}.
  async function act(fields) {
    let response;
    try {
      response = await api("api/actions", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ v: 1, id: ++requestId, ...fields }),
      });
    } catch (error) {
      return { ok: false, error: `The server cannot be reached (${error.message}).` };
    }
    if (!(response.headers.get("content-type") || "").startsWith("application/json")) {
      return { ok: false, error: (await response.text()) || `HTTP ${response.status}` };
    }
    const frame = await response.json();
    if (frame.type === "error") return { ok: false, error: frame.message };
    const result = frame.result.actionResult;
    return result.status === "accepted" ? { ok: true } : { ok: false, error: result.error };
  }

  // -- signing in and out -----------------------------------------------------------------

  async function signIn(candidate) {
    token = candidate;
    $("sign-in-error").textContent = "";
    let response;
    try {
      response = await api("api/session");
    } catch (error) {
      return signInFailed(`The server cannot be reached (${error.message}).`);
    }
    if (!response.ok) return signInFailed(await response.text());
    const session = await response.json();
    sessionStorage.setItem(TOKEN_KEY, candidate);
    $("who").textContent = session.userKey
      ? `${session.userKey} (scope ${session.scopeKey})`
      : `scope ${session.scopeKey}`;
    $("sign-in").hidden = true;
    $("session").hidden = false;
    $("token").value = "";
    follow();
  }

  function signInFailed(message) {
    token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("sign-in-error").textContent = message;
    $("token").setAttribute("aria-invalid", "true");
    $("token").focus();
  }

  function signOut() {
    if (stream) stream.abort();
    stream = null;
    token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    render([]);
    $("empty").hidden = true;
    $("session").hidden = true;
    $("sign-in").hidden = false;
    $("token").removeAttribute("aria-invalid");
    $("token").focus();
  }

  // -- the live feed ----------------------------------------------------------------------

  function setLive(text, live) {
    $("live").textContent = text;
    $("live").classList.toggle("on", live);
  }

  async function follow() {
    if (stream) stream.abort();
    const controller = new AbortController();
    stream = controller;
    let delay = 500;
    while (stream === controller) {
      try {
        const response = await api("api/events", {
          signal: controller.signal,
          headers: { Accept: "text/event-stream" },
        });
        if (response.status === 401) {
          const message = await response.text();
          signOut();
          $("sign-in-error").textContent = message;
          return;
        }
        if (!response.ok || !response.body) {
          throw new Error(`HTTP ${response.status}: ${await response.text()}`);
        }
        setLive("live", true);
        delay = 500;
        await readEvents(response.body, onEvent);
      } catch (error) {
        if (controller.signal.aborted) return;
        console.error("the inbox's event stream failed:", error);
      }
      if (stream !== controller) return;
      setLive("reconnecting…", false);
      await new Promise((wake) => setTimeout(wake, delay)); // back off between reconnections
      delay = Math.min(delay * 2, 10000);
    }
  }

  // Read a text/event-stream body, calling handle(event, data) for each event.
  async function readEvents(body, handle) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let event = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line === "" || line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") event = text;
          else if (field === "data") data.push(text);
        }
        if (data.length) handle(event, JSON.parse(data.join("\n")));
      }
    }
  }

  function onEvent(event, data) {
    if (event === "actions") render(data.actions);
    else if (event === "end") setLive(`stopped: ${data.message}`, false);
  }

  // Show exactly `actions`, in order; a card already shown keeps what was typed into it.
  function render(actions) {
    actions = actions.filter((action) => !resolved.has(keyOf(action)));
    const wanted = new Set(actions.map(keyOf));
    for (const [key, card] of cards) {
      if (!wanted.has(key)) {
        card.remove();
        cards.delete(key);
      }
    }
    const list = $("actions");
    let previous = null;
    for (const action of actions) {
      const key = keyOf(action);
      let card = cards.get(key);
      if (!card) {
        card = actionCard(action);
        cards.set(key, card);
      }
      const expected = previous ? previous.nextSibling : list.firstChild;
      if (card !== expected) list.insertBefore(card, expected);
      previous = card;
    }
    $("empty").hidden = actions.length > 0;
  }

  function done(action, message) {
    const key = keyOf(action);
    resolved.add(key);
    const card = cards.get(key);
    if (card) card.remove();
    cards.delete(key);
    $("empty").hidden = cards.size > 0;
    $("notice").textContent = message;
  }

  // -- an action's card -------------------------------------------------------------------

  function kindOf(ref) {
    if (ref.suspendName) return "Suspension";
    if (ref.actionId === `${ref.toolCallId}.approval`) return "Approval";
    return "Tool output";
  }

  function originChain(chain) {
    return "via " + chain.map((link) => `${link.toolName} → agent ${link.agentId}`).join(" → ");
  }

  function actionCard(action) {
    const id = newId("action");
    const ref = action.ref;
    const origin = el(
      "dl",
      { class: "origin" },
      el("dt", { text: "Thread" }),
      el("dd", { text: ref.threadId }),
      el("dt", { text: "Tool" }),
      el("dd", {
        text: ref.suspendName ? `${ref.toolName}, at “${ref.suspendName}”` : ref.toolName,
      }),
    );
    if (action.originChain && action.originChain.length) {
      origin.append(
        el("dt", { text: "Origin" }),
        el("dd", { class: "chain", text: originChain(action.originChain) }),
      );
    }
    if (action.expiresAt) {
      const at = new Date(action.expiresAt);
      origin.append(
        el("dt", { text: "Deadline" }),
        el("dd", {}, el("time", { datetime: action.expiresAt, text: at.toLocaleString() })),
      );
    }
    return el(
      "li",
      {
        class: "card",
        "aria-labelledby": `${id}-title`,
        "data-thread-id": ref.threadId,
        "data-action-id": ref.actionId,
        "data-name": action.name,
      },
      el(
        "header",
        { class: "card-head" },
        el("h2", { id: `${id}-title`, text: action.name }),
        el("span", { class: "kind", text: kindOf(ref) }),
      ),
      origin,
      el("h3", { text: "Input" }),
      el("pre", { class: "input", tabindex: 0, "aria-label": "Input" }, JSON.stringify(action.input, null, 2)),
      answerForm(action, id),
      resolveForm(action, id),
    );
  }

  function answerForm(action, id) {
    const fields = rootField(action.resumeSchema, id);
    const problem = el("p", { class: "form-error", role: "alert", id: `${id}-problem` });
    const button = el("button", { type: "submit", text: "Submit" });
    const form = el(
      "form",
      { class: "answer", novalidate: true, "aria-describedby": `${id}-problem` },
      el("fieldset", {}, el("legend", { text: "Answer" }), fields.node),
      el("div", { class: "buttons" }, button),
      problem,
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      problem.textContent = "";
      const read = fields.read();
      if (!read.ok) {
        problem.textContent = "Nothing was sent: correct the fields marked above.";
        const invalid = form.querySelector('[aria-invalid="true"]');
        if (invalid) invalid.focus();
        return;
      }
      button.disabled = true;
      const answer = await act({
        op: "submitAction",
        ref: action.ref,
        payload: read.present ? read.value : null,
      });
      button.disabled = false;
      if (answer.ok) return done(action, `Submitted ${action.name}.`);
      problem.textContent = `The server rejected the answer: ${answer.error}`;
      for (const issue of serverIssues(answer.error)) {
        const field = fields.locate(issue.path);
        if (field !== fields || issue.path.length === 0) field.setError(issue.message);
      }
      const invalid = form.querySelector('[aria-invalid="true"]');
      if (invalid) invalid.focus();
    });
    return form;
  }

  function resolveForm(action, id) {
    const reason = el("input", { id: `${id}-reason`, type: "text", name: "reason" });
    const failure = el("input", {
      id: `${id}-failure`,
      type: "text",
      name: "error",
      "aria-required": "true",
      "aria-describedby": `${id}-failure-error`,
    });
    const failureError = el("span", { class: "error", id: `${id}-failure-error` });
    const problem = el("p", { class: "form-error", role: "alert" });
    const send = async (fields, message) => {
      problem.textContent = "";
      const answer = await act({ ref: action.ref, ...fields });
      if (answer.ok) done(action, message);
      else problem.textContent = `The server rejected it: ${answer.error}`;
    };
    const cancel = el("button", {
      type: "button",
      class: "secondary",
      text: "Cancel action",
      onclick: () =>
        send(
          { op: "cancelAction", reason: reason.value.trim() || undefined },
          `Cancelled ${action.name}.`,
        ),
    });
    const fail = el("button", {
      type: "button",
      class: "danger",
      text: "Fail action",
      onclick: () => {
        const error = failure.value.trim();
        failureError.textContent = error ? "" : "Required: say what went wrong.";
        failure.setAttribute("aria-invalid", error ? "false" : "true");
        if (!error) return failure.focus();
        send({ op: "failAction", error }, `Failed ${action.name}.`);
      },
    });
    return el(
      "details",
      { class: "resolve" },
      el("summary", { text: "Cancel or fail instead" }),
      el(
        "fieldset",
        {},
        el("legend", { class: "visually-hidden", text: "Cancel or fail" }),
        el(
          "div",
          { class: "field" },
          el("label", { for: reason.id, text: "Reason (optional)" }),
          reason,
          cancel,
        ),
        el(
          "div",
          { class: "field" },
          el("label", { for: failure.id, text: "Error text" }),
          failure,
          fail,
          failureError,
        ),
        problem,
      ),
    );
  }

  // The runtime's rejection lists one problem a line: "  resume['cents']: Input should be...".
  function serverIssues(text) {
    const issues = [];
    const line = /^\s+[A-Za-z_]\w*((?:\[(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\d+)\])*): (.+)$/;
    const step = /\[(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|(\d+))\]/g;
    for (const row of (text || "").split("\n")) {
      const match = line.exec(row);
      if (!match) continue;
      const path = [...match[1].matchAll(step)].map((part) =>
        part[3] !== undefined ? Number(part[3]) : (part[1] ?? part[2]).replace(/\\(.)/g, "$1"),
      );
      issues.push({ path, message: match[2] });
    }
    return issues;
  }

  // -- forms from JSON Schema -------------------------------------------------------------
  //
  // A field is {node, read() -> {ok, present, value}, setError(message), locate(path)}.
  // read() checks the value against the schema's constraints and marks the field (its
  // message next to it, aria-invalid) or clears it.

  function rootField(schema, id) {
    const context = { root: schema, id };
    if (schema === null || schema === undefined) {
      return jsonField({ schema: {}, label: "Answer (any JSON value)", required: true, context });
    }
    const resolved = normalize(schema, context);
    if (resolved && !resolved.unsupported && resolved.type === "object" && hasProperties(resolved)) {
      return objectField({ schema: resolved, label: null, required: true, context });
    }
    return fieldFor(schema, { name: "answer", label: "Answer", required: true, context });
  }

  const hasProperties = (schema) =>
    schema.properties && typeof schema.properties === "object" && Object.keys(schema.properties).length > 0;

  function deref(schema, context) {
    for (let depth = 0; schema && typeof schema === "object" && typeof schema.$ref === "string"; depth++) {
      if (!schema.$ref.startsWith("#") || depth > 32) return null;
      let node = context.root;
      for (const raw of schema.$ref.slice(1).split("/").slice(1)) {
        node = node == null ? undefined : node[raw.replace(/~1/g, "/").replace(/~0/g, "~")];
      }
      if (node === undefined || node === null || typeof node !== "object") return null;
      const { $ref, ...siblings } = schema;
      schema = { ...node, ...siblings };
    }
    return schema;
  }

  // The schema with local $refs resolved, a single allOf merged, and "X or null" (anyOf,
  // oneOf or a type list) as X with nullable: true; unsupported: true for what the
  // generator does not render as fields (it falls back to JSON); null if unreadable.
  function normalize(schema, context) {
    if (schema === true) return { nullable: false };
    schema = deref(schema, context);
    if (!schema || typeof schema !== "object" || Array.isArray(schema)) return null;
    let nullable = false;
    if (Array.isArray(schema.allOf)) {
      if (schema.allOf.length !== 1) return { ...schema, unsupported: true };
      const { allOf, ...rest } = schema;
      const inner = normalize(allOf[0], context);
      if (!inner) return null;
      schema = { ...inner, ...rest };
      nullable = inner.nullable;
    }
    for (const key of ["anyOf", "oneOf"]) {
      if (!Array.isArray(schema[key])) continue;
      const options = schema[key].map((option) => deref(option, context));
      const others = options.filter((option) => !(option && option.type === "null"));
      if (options.length !== 2 || others.length !== 1) return { ...schema, unsupported: true };
      const { [key]: _, ...rest } = schema;
      const inner = normalize(others[0], context);
      if (!inner) return null;
      schema = { ...inner, ...rest };
      nullable = true;
    }
    if (Array.isArray(schema.type)) {
      const types = schema.type.filter((type) => type !== "null");
      if (types.length !== 1) return { ...schema, unsupported: true };
      nullable = nullable || types.length !== schema.type.length;
      schema = { ...schema, type: types[0] };
    }
    return { ...schema, nullable: Boolean(nullable || schema.nullable) };
  }

  function fieldFor(raw, options) {
    const schema = normalize(raw, options.context);
    if (!schema || schema.unsupported) return jsonField({ ...options, schema: schema || {} });
    options = { ...options, schema, label: options.label ?? schema.title ?? humanize(options.name) };
    if (Array.isArray(schema.enum) || "const" in schema) return enumField(options);
    switch (schema.type) {
      case "string":
        return stringField(options);
      case "number":
      case "integer":
        return numberField(options);
      case "boolean":
        return booleanField(options);
      case "object":
        return hasProperties(schema) ? objectField(options) : jsonField(options);
      case "array": {
        const items = normalize(schema.items === undefined ? true : schema.items, options.context);
        const simple =
          items && !items.unsupported && (SIMPLE_TYPES.includes(items.type) || Array.isArray(items.enum));
        return simple ? arrayField(options, items) : jsonField(options);
      }
      default:
        return jsonField(options);
    }
  }

  function humanize(name) {
    if (!name) return "Value";
    const words = String(name)
      .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
      .replace(/[_-]+/g, " ")
      .trim();
    return words.charAt(0).toUpperCase() + words.slice(1);
  }

  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

  // What the schema asks of a value, shown next to the field.
  function constraints(schema, required) {
    const shown = [];
    if (required) shown.push("required");
    if (schema.type === "integer") shown.push("a whole number");
    const low = schema.exclusiveMinimum ?? schema.minimum;
    const high = schema.exclusiveMaximum ?? schema.maximum;
    if (low !== undefined) shown.push(`${schema.exclusiveMinimum !== undefined ? "more than" : "at least"} ${low}`);
    if (high !== undefined) shown.push(`${schema.exclusiveMaximum !== undefined ? "less than" : "at most"} ${high}`);
    if (schema.multipleOf !== undefined) shown.push(`a multiple of ${schema.multipleOf}`);
    if (schema.minLength !== undefined && schema.maxLength !== undefined) {
      shown.push(`${schema.minLength} to ${plural(schema.maxLength, "character")}`);
    } else if (schema.minLength !== undefined) {
      shown.push(`at least ${plural(schema.minLength, "character")}`);
    } else if (schema.maxLength !== undefined) {
      shown.push(`at most ${plural(schema.maxLength, "character")}`);
    }
    if (schema.pattern !== undefined) shown.push(`matching ${schema.pattern}`);
    if (schema.format !== undefined) shown.push(`format: ${schema.format}`);
    if (schema.minItems !== undefined) shown.push(`at least ${plural(schema.minItems, "item")}`);
    if (schema.maxItems !== undefined) shown.push(`at most ${plural(schema.maxItems, "item")}`);
    if (schema.uniqueItems) shown.push("no duplicates");
    return shown;
  }

  // The label, hint (description and constraints) and error of a field around `control`.
  function frame(options, control, { checkbox = false, hints = true } = {}) {
    const { schema, label, required, context } = options;
    const id = newId(`${context.id}-field`);
    control.id = id;
    if (required) control.setAttribute("aria-required", "true");
    const hint = el("small", { class: "hint", id: `${id}-hint` });
    if (schema.description) hint.append(el("span", { class: "description", text: schema.description }));
    const shown = hints ? constraints(schema, required && !checkbox) : [];
    if (shown.length) hint.append(el("span", { class: "constraints", text: shown.join(" · ") }));
    const error = el("span", { class: "error", id: `${id}-error` });
    control.setAttribute("aria-describedby", `${id}-hint ${id}-error`);
    const labelNode = el("label", { for: id, text: label });
    const node = checkbox
      ? el("div", { class: "field checkbox" }, control, labelNode, hint, error)
      : el("div", { class: "field" }, labelNode, control, hint, error);
    const setError = (message) => {
      error.textContent = message || "";
      control.setAttribute("aria-invalid", message ? "true" : "false");
    };
    return { node, setError };
  }

  function leaf(options, control, check, frameOptions) {
    const { node, setError } = frame(options, control, frameOptions);
    const self = {
      node,
      setError,
      locate: () => self,
      read() {
        const checked = check();
        setError(checked.error);
        return checked.error ? { ok: false } : { ok: true, present: checked.present, value: checked.value };
      },
    };
    return self;
  }

  const missing = (options) =>
    options.required ? { error: "Required." } : { present: false };

  function stringField(options) {
    const { schema } = options;
    const long = schema.maxLength !== undefined && schema.maxLength > 120;
    const inputType = { date: "date", email: "email", uri: "url", "date-time": "text" }[schema.format] || "text";
    const control = long && !schema.format && !schema.pattern
      ? el("textarea", { rows: 2, name: options.name })
      : el("input", { type: inputType, name: options.name });
    if (typeof schema.default === "string") control.value = schema.default;
    if (schema.minLength !== undefined) control.setAttribute("minlength", schema.minLength);
    if (schema.pattern !== undefined) control.setAttribute("pattern", schema.pattern);
    return leaf(options, control, () => {
      const value = control.value;
      if (value === "") return missing(options);
      const length = [...value].length; // JSON Schema counts code points
      if (schema.minLength !== undefined && length < schema.minLength) {
        return { error: `At least ${plural(schema.minLength, "character")}; this has ${length}.` };
      }
      if (schema.maxLength !== undefined && length > schema.maxLength) {
        return { error: `At most ${plural(schema.maxLength, "character")}; this has ${length}.` };
      }
      if (schema.pattern !== undefined) {
        let pattern = null;
        try {
          pattern = new RegExp(schema.pattern, "u");
        } catch (error) {
          pattern = null; // a pattern this browser cannot read: the server checks it
        }
        if (pattern && !pattern.test(value)) return { error: `Must match the pattern ${schema.pattern}.` };
      }
      return { present: true, value };
    });
  }

  function numberField(options) {
    const { schema } = options;
    const integer = schema.type === "integer";
    const control = el("input", {
      type: "number",
      name: options.name,
      step: integer ? "1" : "any",
      inputmode: integer ? "numeric" : "decimal",
    });
    if (schema.minimum !== undefined) control.setAttribute("min", schema.minimum);
    if (schema.maximum !== undefined) control.setAttribute("max", schema.maximum);
    if (typeof schema.default === "number") control.value = String(schema.default);
    return leaf(options, control, () => {
      if (control.validity.badInput) return { error: integer ? "Enter a whole number." : "Enter a number." };
      if (control.value.trim() === "") return missing(options);
      const value = Number(control.value);
      if (!Number.isFinite(value)) return { error: "Enter a number." };
      if (integer && !Number.isInteger(value)) return { error: "Enter a whole number." };
      if (schema.minimum !== undefined && value < schema.minimum) return { error: `Must be at least ${schema.minimum}.` };
      if (schema.maximum !== undefined && value > schema.maximum) return { error: `Must be at most ${schema.maximum}.` };
      if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) {
        return { error: `Must be more than ${schema.exclusiveMinimum}.` };
      }
      if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) {
        return { error: `Must be less than ${schema.exclusiveMaximum}.` };
      }
      if (schema.multipleOf !== undefined && !Number.isInteger(Number((value / schema.multipleOf).toPrecision(12)))) {
        return { error: `Must be a multiple of ${schema.multipleOf}.` };
      }
      return { present: true, value };
    });
  }

  function booleanField(options) {
    const control = el("input", { type: "checkbox", name: options.name });
    control.checked = options.schema.default === true;
    return leaf(options, control, () => ({ present: true, value: control.checked }), { checkbox: true });
  }

  function enumField(options) {
    const { schema } = options;
    const values = Array.isArray(schema.enum) ? schema.enum : [schema.const];
    const control = el("select", { name: options.name });
    const hasDefault = values.some((value) => JSON.stringify(value) === JSON.stringify(schema.default));
    if (!options.required || !hasDefault) control.append(el("option", { value: "", text: "— choose —" }));
    values.forEach((value, index) => {
      const text = typeof value === "string" ? value : JSON.stringify(value);
      const option = el("option", { value: String(index), text });
      if (hasDefault && JSON.stringify(value) === JSON.stringify(schema.default)) option.selected = true;
      control.append(option);
    });
    return leaf(options, control, () =>
      control.value === "" ? missing(options) : { present: true, value: values[Number(control.value)] },
    );
  }

  function jsonField(options) {
    const { schema } = options;
    const control = el("textarea", { rows: 4, name: options.name, class: "json", spellcheck: "false" });
    if (schema.default !== undefined) control.value = JSON.stringify(schema.default, null, 2);
    const label = options.label ?? schema.title ?? humanize(options.name);
    return leaf({ ...options, label: `${label} (JSON)` }, control, () => {
      if (control.value.trim() === "") return missing(options);
      try {
        return { present: true, value: JSON.parse(control.value) };
      } catch (error) {
        return { error: `Not valid JSON: ${error.message}` };
      }
    });
  }

  function objectField(options) {
    const { schema, context } = options;
    const required = new Set(Array.isArray(schema.required) ? schema.required : []);
    const children = new Map();
    const body = el("div", { class: "fields" });
    for (const [name, property] of Object.entries(schema.properties)) {
      const child = fieldFor(property, { name, required: required.has(name), context });
      children.set(name, child);
      body.append(child.node);
    }
    const error = el("span", { class: "error" });
    const node = options.label === null
      ? el("div", { class: "object" }, body, error)
      : el(
          "fieldset",
          { class: "object" },
          el("legend", { text: options.label }),
          schema.description ? el("small", { class: "hint", text: schema.description }) : null,
          body,
          error,
        );
    const self = {
      node,
      setError(message) {
        error.textContent = message || "";
      },
      locate(path) {
        if (path.length === 0) return self;
        const child = children.get(String(path[0]));
        return child ? child.locate(path.slice(1)) : self;
      },
      read() {
        error.textContent = "";
        const reads = [...children].map(([name, child]) => [name, child.read()]);
        const given = reads.some(([name, read]) => read.present && !(read.value === false && !required.has(name)));
        if (!options.required && !given) {
          for (const child of children.values()) child.setError("");
          return { ok: true, present: false };
        }
        const value = {};
        let ok = true;
        for (const [name, read] of reads) {
          if (!read.ok) ok = false;
          else if (read.present) value[name] = read.value;
        }
        return ok ? { ok: true, present: true, value } : { ok: false };
      },
    };
    return self;
  }

  function arrayField(options, itemSchema) {
    const { schema, context } = options;
    const items = [];
    const list = el("ol", { class: "items" });
    const error = el("span", { class: "error", id: newId(`${context.id}-items-error`) });
    const add = el("button", { type: "button", class: "secondary", text: `Add ${humanize(options.name).toLowerCase()}` });
    const addItem = (value) => {
      const item = fieldFor(itemSchema, {
        name: options.name,
        label: `Item ${items.length + 1}`,
        required: true,
        context,
      });
      const remove = el("button", { type: "button", class: "secondary small", text: "Remove" });
      const row = el("li", {}, item.node, remove);
      const entry = { item, row };
      remove.addEventListener("click", () => {
        items.splice(items.indexOf(entry), 1);
        row.remove();
        items.forEach((each, index) => {
          const label = each.row.querySelector("label");
          if (label) label.textContent = `Item ${index + 1}`;
        });
        add.focus();
      });
      if (value !== undefined) {
        const control = row.querySelector("input, select, textarea");
        if (control && control.type === "checkbox") control.checked = Boolean(value);
        else if (control) control.value = String(value);
      }
      items.push(entry);
      list.append(row);
      return row;
    };
    add.addEventListener("click", () => {
      const row = addItem();
      const control = row.querySelector("input, select, textarea");
      if (control) control.focus();
    });
    if (Array.isArray(schema.default)) schema.default.forEach((value) => addItem(value));
    const hint = el("small", { class: "hint" });
    if (schema.description) hint.append(el("span", { class: "description", text: schema.description }));
    const shown = constraints(schema, options.required);
    if (shown.length) hint.append(el("span", { class: "constraints", text: shown.join(" · ") }));
    const node = el(
      "fieldset",
      { class: "array", "aria-describedby": error.id },
      el("legend", { text: options.label }),
      hint,
      list,
      add,
      error,
    );
    const self = {
      node,
      setError(message) {
        error.textContent = message || "";
        node.setAttribute("aria-invalid", message ? "true" : "false");
      },
      locate(path) {
        if (path.length === 0) return self;
        const entry = items[Number(path[0])];
        return entry ? entry.item.locate(path.slice(1)) : self;
      },
      read() {
        self.setError("");
        const reads = items.map((entry) => entry.item.read());
        if (reads.some((read) => !read.ok)) return { ok: false };
        const value = reads.map((read) => read.value);
        if (value.length === 0 && !options.required) return { ok: true, present: false };
        let problem = "";
        if (schema.minItems !== undefined && value.length < schema.minItems) {
          problem = `At least ${plural(schema.minItems, "item")}; this has ${value.length}.`;
        } else if (schema.maxItems !== undefined && value.length > schema.maxItems) {
          problem = `At most ${plural(schema.maxItems, "item")}; this has ${value.length}.`;
        } else if (schema.uniqueItems && new Set(value.map((v) => JSON.stringify(v))).size !== value.length) {
          problem = "The items must all differ.";
        }
        self.setError(problem);
        return problem ? { ok: false } : { ok: true, present: true, value };
      },
    };
    return self;
  }

  // -- start ------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    $("sign-in").addEventListener("submit", (event) => {
      event.preventDefault();
      const candidate = $("token").value.trim();
      if (!candidate) {
        $("sign-in-error").textContent = "Enter your bearer token.";
        $("token").setAttribute("aria-invalid", "true");
        return;
      }
      signIn(candidate);
    });
    $("sign-out").addEventListener("click", signOut);
    // Leaving the page closes its stream (a page kept in the back-forward cache would hold
    // it open); coming back to it opens a new one.
    window.addEventListener("pagehide", () => {
      if (stream) stream.abort();
      stream = null;
    });
    window.addEventListener("pageshow", (event) => {
      if (event.persisted && token) follow();
    });
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) signIn(saved);
    else $("token").focus();
  });
})();
