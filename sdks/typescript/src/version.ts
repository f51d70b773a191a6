/** The SDK's name and version as sent in `Hello.sdk`, and the runtime as in `Hello.runtime`. */

/** The package version (kept equal to package.json's by a unit test). */
export const VERSION = "0.1.0";
/** `Hello.sdk`: `orbit-typescript <version>`. */
export const SDK = `orbit-typescript ${VERSION}`;
/** `Hello.runtime`: `node <version>`. */
export const RUNTIME = `node ${process.versions.node}`;
