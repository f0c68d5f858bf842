/**
 * `schemas:register` (ADR 011): registers every public topic's schemas in the schema registry, the
 * only way they get there (producers never register). Per subject `<topic>-<record full name>` it
 * sets FULL_TRANSITIVE, then registers the released versions oldest first and the current one last.
 * Idempotent; the migrate Job runs it before migrations, so a new version is registered before any
 * pod that writes it starts.
 *
 *   SCHEMA_REGISTRY_URL=http://registry:8080/apis/ccompat/v7 [SCHEMA_REGISTRY_AUTH=/path/user-pass] [TOPIC_PREFIX=] node cli/schemas-register.js
 *
 * Exit 0: registered (or no SCHEMA_REGISTRY_URL: nothing to do). 65: the registry refused a version as
 * incompatible (naming the subject). 69: the registry did not answer. 78: bad configuration.
 */
import { Type } from '@sinclair/typebox';
import { envSchema } from 'env-schema';
import { readRegistryAuth, SchemaRegistryClient, SchemaRegistryError } from '@outreach/shared';
import { registerSchemas, SchemaRegistrationError, SUBJECT_COMPATIBILITY } from '@outreach/shared';

const Env = Type.Object({
  SCHEMA_REGISTRY_URL: Type.String({ default: '', pattern: '^(https?://.+)?$' }),
  SCHEMA_REGISTRY_AUTH: Type.String({ default: '' }),
  SCHEMA_REGISTRY_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 10_000 }),
  TOPIC_PREFIX: Type.String({ default: '', pattern: '^[a-zA-Z0-9._-]*$' }),
});

async function main(): Promise<number> {
  let env: {
    SCHEMA_REGISTRY_URL: string;
    SCHEMA_REGISTRY_AUTH: string;
    SCHEMA_REGISTRY_TIMEOUT_MS: number;
    TOPIC_PREFIX: string;
  };
  let basicAuth: string | undefined;
  try {
    env = envSchema({ schema: Env, dotenv: false });
    basicAuth = readRegistryAuth(env.SCHEMA_REGISTRY_AUTH);
  } catch (error) {
    process.stderr.write(`schemas:register: ${(error as Error).message.replace(/\benv\b/g, 'environment')}\n`);
    return 78;
  }
  if (!env.SCHEMA_REGISTRY_URL) {
    console.log('schemas:register: no SCHEMA_REGISTRY_URL, nothing to register');
    return 0;
  }
  const client = new SchemaRegistryClient({
    url: env.SCHEMA_REGISTRY_URL,
    timeoutMs: env.SCHEMA_REGISTRY_TIMEOUT_MS,
    ...(basicAuth ? { basicAuth } : {}),
  });
  try {
    const registered = await registerSchemas(client, { prefix: env.TOPIC_PREFIX });
    for (const { subject, ids } of registered) {
      console.log(`${SUBJECT_COMPATIBILITY.padEnd(16)} ${subject} ids ${ids.join(', ')}`);
    }
    console.log(`registered ${registered.length} subjects at ${client.url}`);
    return 0;
  } catch (error) {
    if (error instanceof SchemaRegistrationError) {
      process.stderr.write(`schemas:register: INCOMPATIBLE ${error.message}\n`);
      return 65;
    }
    if (error instanceof SchemaRegistryError) {
      process.stderr.write(`schemas:register: ${error.message}\n`);
      return error.unavailable ? 69 : 78;
    }
    throw error;
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`schemas:register: ${String((error as Error)?.stack ?? error)}\n`);
    process.exit(1);
  },
);
