/**
 * JSON payloads: the normalisation of a handler's value into plain JSON and the server's
 * payload limits (`docs/events.md`, "Payload limits"). A result over the limits would be
 * refused by the server, so the worker reports a `Fail` with the payload code instead and
 * the execution goes on.
 */

export const MAX_DEPTH = 24;
export const MAX_PAYLOAD_BYTES = 2 * 1024 * 1024;
export const PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE";
export const PAYLOAD_TOO_DEEP = "PAYLOAD_TOO_DEEP";

/** JSON values as handlers see and return them. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Nesting depth of arrays and objects (a scalar is 0), walked without recursion. */
export function payloadDepth(value: unknown): number {
  let depth = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [v, level] = stack.pop()!;
    if (v === null || typeof v !== "object") continue;
    depth = Math.max(depth, level + 1);
    if (depth > MAX_DEPTH) return depth; // deep enough to refuse; stop walking a hostile value
    const children = Array.isArray(v) ? v : Object.values(v as object);
    for (const c of children) stack.push([c, level + 1]);
  }
  return depth;
}

/** A checked payload: its plain-JSON form, or why it cannot be sent. */
export type Checked = { ok: true; value: Json | undefined } | { ok: false; code: string; message: string };

/**
 * Normalises `value` to plain JSON (as `JSON.stringify` would: `toJSON`, dropped
 * `undefined`) and checks the limits. `undefined` stays unset (null on the server).
 */
export function checkPayload(value: unknown, what: string): Checked {
  if (value === undefined) return { ok: true, value: undefined };
  const depth = payloadDepth(value);
  if (depth > MAX_DEPTH) {
    return { ok: false, code: PAYLOAD_TOO_DEEP, message: `${what} is nested more than ${MAX_DEPTH} levels deep` };
  }
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    return { ok: false, code: "UNHANDLED_EXCEPTION", message: `${what} is not JSON: ${(e as Error).message}` };
  }
  if (text === undefined) return { ok: true, value: undefined }; // a function or symbol
  const size = Buffer.byteLength(text, "utf8");
  if (size > MAX_PAYLOAD_BYTES) {
    return { ok: false, code: PAYLOAD_TOO_LARGE, message: `${what} is ${size} bytes (max_payload_bytes ${MAX_PAYLOAD_BYTES})` };
  }
  return { ok: true, value: JSON.parse(text) as Json };
}
