import pg from 'pg';
import { createPool, migrate, quoteIdent } from '@outreach/shared';

export * from './avro-bombs.js';
export { readFromTable } from './files.js';
export { recordingPool } from './recording-pool.js';
export { sendRecordedEvent } from './send-recorded.js';
export { withLivePool } from './live-pool.js';
export { waitFor } from '@outreach/shared';
export { uniqueName } from './names.js';
export { dropWireFormatSubjects, wireFormatEnv, wireFormatFromEnv } from './wire-format.js';
export { readTopic, type ReadMessage } from './read-topic.js';
export { planScans } from './explain.js';
import { uniqueName } from './names.js';

export interface IsolatedSchema {
  readonly schema: string;
  readonly pool: pg.Pool;
  drop(): Promise<void>;
}

/**
 * A fresh Postgres schema for one spec, with a pool whose search_path points at it, so specs can
 * run in parallel against one database without seeing each other's rows.
 */
export async function isolatedSchema(databaseUrl: string, prefix: string): Promise<IsolatedSchema> {
  const schema = uniqueName(prefix);
  const admin = new pg.Client({ connectionString: databaseUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE SCHEMA ${quoteIdent(schema)}`);
  } finally {
    await admin.end();
  }
  const pool = createPool({ connectionString: databaseUrl, applicationName: `test-${prefix}`, schema, max: 5 });
  return {
    schema,
    pool,
    async drop() {
      await pool.end();
      const client = new pg.Client({ connectionString: databaseUrl });
      await client.connect();
      try {
        await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
      } finally {
        await client.end();
      }
    },
  };
}

/** An isolated schema (see isolatedSchema) with a service's migrations and the outbox applied. */
export async function migratedSchema(
  databaseUrl: string,
  prefix: string,
  migrationsDir: string,
): Promise<IsolatedSchema> {
  const isolated = await isolatedSchema(databaseUrl, prefix);
  await migrate({ databaseUrl, schema: isolated.schema, dir: migrationsDir, outbox: true });
  return isolated;
}

export { freePort, startCommand, startProcess, type RunningProcess } from './process.js';
export { OtlpReceiver, type ReceivedSpan } from './otlp-receiver.js';
export { SmtpSink, type DeliveredMessage, type SmtpHostility, type SmtpSinkOptions } from './smtp-sink.js';
export { actsOnRequest, playHostility, readRequestBody, sendJson, type HttpHostility } from './http-hostility.js';
export { deciderSpec } from './given.js';
export {
  deleteTopicsWithPrefix,
  serviceTestEnv,
  testEmailHashKey,
  TEST_EMAIL_HASH_ENV,
  TEST_IDENTIFIER_KEY_ENV,
  TEST_SUPPRESSION_KEY_ENV,
  type ServiceTestEnv,
  type TestInfra,
} from './service-env.js';
export {
  fuzzRoutes,
  probeRouteGuards,
  rawRequest,
  ROUTE_TEST_TOKENS,
  scopeTable,
  slowClients,
  type SlowClientsResult,
} from './http-attacks.js';
export { selfSignedCertificate } from './x509.js';
export { tcpProxy, type TcpProxy } from './tcp-proxy.js';
export { bearer, expectFuzzSurvived, ownService, routeScopeTests, routesUnderTest } from './route-tests.js';
export { sendRecorded } from './events.js';
