/**
 * PLAIN and SCRAM logins from one snapshot of the username and password. kafkajs' own SCRAM reads
 * `sasl.username` four times and `sasl.password` three times in one login; with credentials read
 * again from their files (security.ts), a rotation landing mid-login would sign the proof with one
 * password and check the server's signature with another ("Invalid server signature", not retried).
 * This hands kafkajs' built-in mechanism a plain object taken once per authentication.
 */
import { createRequire } from 'node:module';
import type { AuthenticationProviderArgs, Authenticator } from 'kafkajs';
import { PATCHED_KAFKAJS_VERSION } from './kafkajs-patches.js';

const require = createRequire(import.meta.url);

type BuiltIn = (sasl: {
  mechanism: string;
  username: string;
  password: string;
}) => (args: AuthenticationProviderArgs) => Authenticator;

const BUILT_IN_FILES: Readonly<Record<string, string>> = {
  plain: 'plain',
  'scram-sha-256': 'scram256',
  'scram-sha-512': 'scram512',
};

/** kafkajs' built-in provider of `mechanism`, when this kafkajs is the version read (2.2.4) and has it where it was. */
function builtInProvider(mechanism: string): BuiltIn | undefined {
  const file = BUILT_IN_FILES[mechanism];
  if (file === undefined) return undefined;
  try {
    const { version } = require('kafkajs/package.json') as { version: string };
    if (version !== PATCHED_KAFKAJS_VERSION) return undefined;
    const provider = require(`kafkajs/src/broker/saslAuthenticator/${file}.js`) as unknown;
    return typeof provider === 'function' ? (provider as BuiltIn) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * kafkajs' `authenticationProvider` for `mechanism` from one snapshot per login; undefined for a
 * mechanism kafkajs does not build in, or another kafkajs version (which then reads the options'
 * getters as before, each read a fresh one).
 */
export function snapshotAuthenticator(
  mechanism: string,
  credentials: () => { readonly username: string; readonly password: string },
): ((args: AuthenticationProviderArgs) => Authenticator) | undefined {
  const builtIn = builtInProvider(mechanism);
  if (builtIn === undefined) return undefined;
  return (args) => {
    const { username, password } = credentials();
    return builtIn({ mechanism, username, password })(args);
  };
}
