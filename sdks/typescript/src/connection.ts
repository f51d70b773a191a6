/**
 * Where and how to connect: frontend addresses, TLS / mutual TLS and the bearer token,
 * resolved the way the Rust clients and the Python worker do (`docs/security.md`,
 * "Clients"). Each option not given comes from its `ORBIT_*` variable; an empty value
 * means "none".
 */
import { readFileSync } from "node:fs";
import { credentials, Metadata, type ChannelCredentials } from "@grpc/grpc-js";

/** Connection options shared by {@link Worker} and {@link OrbitClient}. */
export interface ConnectionConfig {
  /**
   * One frontend (`host:port`, `http://host:port` or `https://host:port`) or several, tried
   * in order: the worker moves to the next when one is unreachable. Default
   * `$ORBIT_ADDRESSES` (comma-separated) or `127.0.0.1:7233`.
   */
  address?: string | string[];
  /** CA that signed the frontends' certificates: dial TLS. Default `$ORBIT_TLS_CA`. */
  tlsCa?: string;
  /** Client certificate for mutual TLS (needs `tlsClientKey`). Default `$ORBIT_TLS_CLIENT_CERT`. */
  tlsClientCert?: string;
  /** Key of `tlsClientCert`. Default `$ORBIT_TLS_CLIENT_KEY`. */
  tlsClientKey?: string;
  /** Bearer token sent as `authorization: Bearer <token>`. Default `$ORBIT_TOKEN`. */
  token?: string;
  /** The environment to read defaults from (default `process.env`). */
  env?: Record<string, string | undefined>;
}

/** The resolved settings: gRPC targets, TLS files and call metadata. */
export interface ResolvedConnection {
  /** `host:port` of each frontend, in the order to try them. */
  targets: string[];
  tls: boolean;
  ca?: string;
  cert?: string;
  key?: string;
  token?: string;
}

function fromEnv(value: string | undefined, name: string, env: Record<string, string | undefined>) {
  const v = value ?? env[name];
  return v ? v : undefined;
}

/** Resolves and validates the options; throws `Error` for inconsistent ones. */
export function resolveConnection(config: ConnectionConfig = {}): ResolvedConnection {
  const env = config.env ?? process.env;
  const ca = fromEnv(config.tlsCa, "ORBIT_TLS_CA", env);
  const cert = fromEnv(config.tlsClientCert, "ORBIT_TLS_CLIENT_CERT", env);
  const key = fromEnv(config.tlsClientKey, "ORBIT_TLS_CLIENT_KEY", env);
  const token = fromEnv(config.token, "ORBIT_TOKEN", env);
  let addresses: string[];
  if (config.address === undefined) {
    addresses = (env.ORBIT_ADDRESSES || "127.0.0.1:7233").split(",");
  } else {
    addresses = typeof config.address === "string" ? config.address.split(",") : config.address;
  }
  addresses = addresses.map((a) => a.trim()).filter((a) => a !== "");
  if (addresses.length === 0) throw new Error("at least one frontend address is required");

  let tls: boolean | undefined;
  const targets = addresses.map((address) => {
    const sep = address.indexOf("://");
    const scheme = sep < 0 ? (ca ? "https" : "http") : address.slice(0, sep);
    const rest = sep < 0 ? address : address.slice(sep + 3);
    if (scheme !== "http" && scheme !== "https") {
      throw new Error(`address \`${address}\`: the scheme must be http:// or https://`);
    }
    const target = rest.replace(/\/+$/, "");
    if (!target || target.includes("/")) throw new Error(`address \`${address}\` is not host:port`);
    const isTls = scheme === "https";
    if (tls !== undefined && tls !== isTls) throw new Error("all addresses must use the same scheme");
    tls = isTls;
    if (!isTls && (ca || cert || key)) {
      throw new Error(`TLS options given but the address \`${address}\` is http://`);
    }
    if (isTls && !ca) {
      throw new Error(`an https address needs a TLS CA (tlsCa or ORBIT_TLS_CA): \`${address}\``);
    }
    return target;
  });
  if ((cert === undefined) !== (key === undefined)) {
    throw new Error("a TLS client certificate needs its key, and the reverse");
  }
  if (token !== undefined && !/^[\x21-\x7e]+$/.test(token)) {
    // gRPC metadata values are printable ASCII; a pasted token with a newline or a space
    // would otherwise fail at the first call with an obscure error.
    throw new Error("the bearer token must be printable ASCII without spaces");
  }
  return { targets, tls: tls ?? false, ca, cert, key, token };
}

/**
 * Channel credentials, reading the PEM files now (throws when one is unreadable). Called
 * at every (re)connect so a renewed certificate is picked up without a restart.
 */
export function channelCredentials(c: ResolvedConnection): ChannelCredentials {
  if (!c.tls) return credentials.createInsecure();
  const read = (path?: string) => (path === undefined ? null : readFileSync(path));
  return credentials.createSsl(read(c.ca), read(c.key), read(c.cert));
}

/** The call metadata: `authorization: Bearer <token>` when a token is set. */
export function callMetadata(c: ResolvedConnection): Metadata {
  const md = new Metadata();
  if (c.token !== undefined) md.set("authorization", `Bearer ${c.token}`);
  return md;
}

/** Keepalive options for long-lived streams through proxies. */
export const CHANNEL_OPTIONS = {
  "grpc.keepalive_time_ms": 30_000,
  "grpc.keepalive_timeout_ms": 10_000,
  "grpc.max_receive_message_length": 16 * 1024 * 1024,
};
