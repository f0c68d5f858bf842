/**
 * PLAIN and SCRAM logins from one snapshot of the username and password. kafkajs' own SCRAM reads
 * `sasl.username` four times and `sasl.password` three times in one login; with credentials read
 * again from their files (security.ts), a rotation landing mid-login would sign the proof with one
 * password and check the server's signature with another ("Invalid server signature", not retried).
 * This hands kafkajs' built-in mechanism a plain object taken once per authentication.
 */
import { createRequire } from 'node:module';
import type { AuthenticationProviderArgs, Authenticator } from 'kafkajs';

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

/** kafkajs' `authenticationProvider` for `mechanism`, or undefined for a mechanism it does not build in. */
export function snapshotAuthenticator(
  mechanism: string,
  credentials: () => { readonly username: string; readonly password: string },
): ((args: AuthenticationProviderArgs) => Authenticator) | undefined {
  const file = BUILT_IN_FILES[mechanism];
  if (file === undefined) return undefined;
  const builtIn = require(`kafkajs/src/broker/saslAuthenticator/${file}.js`) as BuiltIn;
  return (args) => {
    const { username, password } = credentials();
    return builtIn({ mechanism, username, password })(args);
  };
}
