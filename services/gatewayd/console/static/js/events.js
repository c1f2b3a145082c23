// The live stream (SPEC §12.3) read with fetch, since EventSource cannot send the key's header
// (§12.1): a parser of the Server-Sent Events format as the HTML standard defines it (fields,
// comments, CRLF, LF or CR line ends, `id`, `retry`), and what EventSource does around it: it
// connects again after `retry` ms, sending `Last-Event-ID`, whenever the stream ends or fails.

/**
 * A parser of the stream's text: `feed(chunk)` as text comes (any split, even inside a line
 * or between CR and LF), `dispatch(name, data, id)` for each whole event. `lastId()` and
 * `retry()` are what the stream last set (an `id` field counts from the blank line after it).
 */
export function parser(dispatch) {
  let buffer = "";
  let name = "";
  let data = [];
  let idBuffer = "";
  let lastId = "";
  let retry = null;

  function field(line) {
    if (line === "") {
      lastId = idBuffer;
      if (data.length) dispatch(name || "message", data.join("\n"), lastId);
      name = "";
      data = [];
      return;
    }
    if (line.startsWith(":")) return; // a comment: the keepalive
    const colon = line.indexOf(":");
    const key = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (key === "event") name = value;
    else if (key === "data") data.push(value);
    else if (key === "id" && !value.includes("\0")) idBuffer = value;
    else if (key === "retry" && /^[0-9]+$/.test(value)) retry = Number(value);
  }

  return {
    feed(chunk) {
      buffer += chunk;
      for (;;) {
        const end = buffer.search(/[\r\n]/);
        if (end === -1) return;
        // A CR last in what came so far may be the first half of a CRLF: wait for more.
        if (buffer[end] === "\r" && end === buffer.length - 1) return;
        const next = buffer[end] === "\r" && buffer[end + 1] === "\n" ? end + 2 : end + 1;
        const line = buffer.slice(0, end);
        buffer = buffer.slice(next);
        field(line);
      }
    },
    lastId: () => lastId,
    retry: () => retry,
  };
}

/**
 * Listen to `url` with `headers()` (asked again at each connection) until `close()`.
 * `on(name, data)` for each event; `down()` when a stream ended or failed and another is on
 * its way; `refused()` on 401, after which nothing more is tried.
 */
export function listen(url, { headers, on, down, refused }) {
  let closed = false;
  let controller = null;
  let lastId = "";
  let retryMs = 1000;

  async function once() {
    controller = new AbortController();
    const sent = { ...headers(), Accept: "text/event-stream" };
    if (lastId) sent["Last-Event-ID"] = lastId;
    const response = await fetch(url, {
      headers: sent,
      credentials: "same-origin",
      cache: "no-store",
      signal: controller.signal,
    });
    if (response.status === 401) {
      closed = true;
      refused();
      return;
    }
    const type = response.headers.get("content-type") || "";
    if (!response.ok || !type.startsWith("text/event-stream") || !response.body) return;
    const parse = parser((name, data) => {
      if (!closed) on(name, data);
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done || closed) break;
      parse.feed(value);
      lastId = parse.lastId() || lastId;
      if (parse.retry() !== null) retryMs = parse.retry();
    }
  }

  async function run() {
    while (!closed) {
      try {
        await once();
      } catch {
        // gatewayd restarting, the laptop asleep, the stream cut: try again, as EventSource
      }
      if (closed) return;
      down();
      await new Promise((wake) => setTimeout(wake, retryMs));
    }
  }

  run();
  return {
    close() {
      closed = true;
      controller?.abort();
    },
  };
}
