/**
 * The reliability scenarios, each one fault injected into real processes: sender SIGKILLs (without a
 * lookup, with the delivery lookup that settles sends in doubt, and with delivery evidence pushed
 * by a SendGrid-shaped provider or as success DSNs), a hostile SMTP server, rebalancing
 * senders, a broker restart, a database restart, triple-published requests, a partition increase,
 * a sender whose clock runs 2 hours ahead, and a sender SIGKILL with everything on SASL_SSL (sasl-ssl.ts).
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { topicName } from '@outreach/shared';
import { root } from '../lib/paths.js';
import { CONCURRENCY } from './common.js';
import { saslSsl } from './sasl-ssl.js';
import type { Run, Scenario } from './scenario.js';

/** The load when a scenario names none: one planner, one sender, each request published once. */
export async function startDefault(run: Run): Promise<void> {
  await run.stack.start('planner');
  await run.stack.start('sender');
  await run.publish(run.requests);
}

/** SIGKILLs the sender `kills` times at random points of the deliveries, restarting it after each. */
async function killSender(run: Run, kills: number): Promise<number> {
  const points = Array.from({ length: kills }, () => 0.1 + Math.random() * 0.75).sort((a, b) => a - b);
  for (const point of points) {
    await run.progress(point);
    await run.beforeSenderKill();
    await run.stack.stop('sender', 'SIGKILL');
    await run.stack.start('sender');
  }
  run.note(`kills at ${points.map((p) => `${Math.round(p * 100)}%`).join(', ')} of deliveries`);
  return points.length * CONCURRENCY;
}

export const scenarios: readonly Scenario[] = [
  {
    name: 'sender-sigkill-x5',
    fault: 'the sender is SIGKILLed at five random points and restarted after each',
    sinkDelayMs: 10,
    kills: 5,
    inject: (run) => killSender(run, 5),
  },
  {
    name: 'sender-sigkill-x5-lookup',
    fault:
      "the sender is SIGKILLed at five random points and restarted after each, with the delivery lookup on (the SMTP server's Mailpit search API)",
    sinkDelayMs: 10,
    kills: 5,
    lookup: true,
    inject: (run) => killSender(run, 5),
  },
  {
    name: 'sender-sigkill-x5-sendgrid',
    fault:
      'the sender is SIGKILLed at five random points and restarted after each, while the provider (SendGrid-shaped) posts a signed processed or delivered event for every message it takes, retrying while the sender is down; PROVIDER_LOOKUP=evidence',
    sinkDelayMs: 10,
    kills: 5,
    evidence: 'sendgrid',
    inject: (run) => killSender(run, 5),
  },
  {
    name: 'sender-sigkill-x5-dsn',
    fault:
      'the sender is SIGKILLed at five random points and restarted after each, with success DSNs asked for (SMTP_DSN_SUCCESS) from an SMTP server that offers DSN and posts an RFC 3464 success DSN to the DSN hook for every message it takes, retrying while the sender is down; PROVIDER_LOOKUP=evidence',
    sinkDelayMs: 10,
    kills: 5,
    evidence: 'dsn',
    inject: (run) => killSender(run, 5),
  },
  {
    name: 'hostile-smtp',
    fault:
      'the SMTP server receives every 20th message in full and closes the connection without answering the final dot, while the sender is SIGKILLed three times',
    sinkDelayMs: 10,
    hostile: (n) => (n % 20 === 0 ? { at: 'dot', act: 'drop' } : undefined),
    async inject(run) {
      const points = Array.from({ length: 3 }, () => 0.15 + Math.random() * 0.7).sort((a, b) => a - b);
      for (const point of points) {
        await run.progress(point);
        await run.stack.stop('sender', 'SIGKILL');
        await run.stack.start('sender');
      }
      run.note(`kills at ${points.map((p) => `${Math.round(p * 100)}%`).join(', ')} of deliveries`);
      return points.length * CONCURRENCY;
    },
  },
  {
    name: 'two-senders-rebalancing',
    fault: 'a second sender joins, the first leaves (SIGTERM) and rejoins, under a slow provider (40 ms a message)',
    sinkDelayMs: 40,
    async inject(run) {
      await run.progress(0.2);
      await run.stack.start('sender', { instance: 1 });
      await run.progress(0.5);
      await run.stack.stop('sender', 'SIGTERM');
      await run.progress(0.7);
      await run.stack.start('sender');
      run.note('joins at 20% and 70%, a graceful leave at 50%');
      // A graceful leave finishes its sends before it gives up its partitions: nothing is in doubt.
      return 0;
    },
  },
  {
    name: 'kafka-restart',
    fault: "the Kafka broker (the suite's own) is stopped and started again mid-run",
    ownKafka: true,
    sinkDelayMs: 10,
    async inject(run) {
      await run.progress(0.3);
      const started = Date.now();
      const noticed = await run.restartKafka?.();
      run.note(
        `broker down and back in ${((Date.now() - started) / 1000).toFixed(1)} s at 30% of deliveries; the sender ${noticed ? 'reported itself unready meanwhile' : 'stayed ready throughout'}`,
      );
      return CONCURRENCY;
    },
  },
  {
    name: 'postgres-restart',
    fault: "PostgreSQL (the suite's own instance) is stopped (fast shutdown) and started again mid-run",
    ownPostgres: true,
    sinkDelayMs: 10,
    async inject(run) {
      await run.progress(0.3);
      const started = Date.now();
      const noticed = await run.restartPostgres?.();
      run.note(
        `database down and back in ${((Date.now() - started) / 1000).toFixed(1)} s at 30% of deliveries; the sender ${noticed ? 'reported itself unready meanwhile' : 'stayed ready throughout'}`,
      );
      // The provider's answers are known: recording them is retried until the database is back, so a
      // restart shorter than a lease leaves no send in doubt.
      return 0;
    },
  },
  {
    name: 'triple-publish-variants',
    fault:
      'every request arrives three times: as sent, with its address upper-cased and both ids padded with spaces, and through HTTP with a mixed-case address',
    async load(run) {
      await run.stack.start('planner');
      await run.stack.start('sender');
      const padded = run.requests.map((r) => ({
        ...r,
        eventId: randomUUID(),
        candidateId: `  ${r.candidateId} `,
        email: ` ${r.email.toUpperCase()}  `,
      }));
      await run.publish(run.requests);
      await run.publish(padded);
      const mixedCase = run.requests.map((r) => ({
        ...r,
        email: r.email.replace(/^c/, 'C').replace('example.com', 'Example.COM'),
      }));
      await run.publish(mixedCase, { via: 'http' });
      run.note(`${run.requests.length * 3} requests published for ${run.requests.length} sends`);
    },
    inject: () => Promise.resolve(0),
  },
  {
    name: 'partition-increase',
    fault:
      'outreach.requested and send.requested grow from 2 to 6 partitions mid-run; the rest of the load and a copy of the first third follow',
    partitions: 2,
    sinkDelayMs: 5,
    async load(run) {
      await run.stack.start('planner');
      await run.stack.start('sender');
      await run.publish(run.requests.slice(0, Math.floor(run.requests.length * 0.6)));
    },
    async inject(run) {
      await run.progress(0.3);
      const admin = run.kafka.admin();
      await admin.connect();
      await admin.createPartitions({
        topicPartitions: (['outreachRequested', 'sendRequested'] as const).map((id) => ({
          topic: topicName(id, run.stack.prefix),
          count: 6,
        })),
      });
      await admin.disconnect();
      // A fresh producer sees the new partitions at once: the keys of the rest now hash over six.
      const rest = run.requests.slice(Math.floor(run.requests.length * 0.6));
      const again = run.requests.slice(0, Math.floor(run.requests.length / 3)).map((r) => ({
        ...r,
        eventId: randomUUID(),
      }));
      await run.publish([...rest, ...again], { fresh: true });
      run.note(
        `${rest.length} new and ${again.length} repeated requests after the increase; the consumers found the new partitions by metadata refresh, with no restart`,
      );
      return 0;
    },
  },
  {
    name: 'skewed-clock-sender',
    fault:
      "one of two senders runs with its system clock 2 hours ahead (libfaketime, or a Node clock shim if it isn't installed)",
    sinkDelayMs: 10,
    async load(run) {
      await run.stack.start('planner');
      const skew = skewedClock('+2h', 2 * 3_600_000);
      const skewed = await run.stack.start('sender', { instance: 1, env: { ...skew.env, LOG_LEVEL: 'info' } });
      await run.stack.start('sender');
      await run.publish(run.requests);
      const times = skewed.stdoutLines.map((line) => Date.parse(String(parseLogLine(line)?.time)));
      const first = times.find((t) => Number.isFinite(t));
      const observed = first === undefined ? undefined : Math.round((first - Date.now()) / 60_000);
      if (observed === undefined || observed < 110) {
        throw new Error(`the skewed sender does not run 2 h ahead (observed ${observed ?? 'no'} minutes)`);
      }
      run.note(`${skew.how}; the skewed sender logged times ${observed} minutes ahead`);
    },
    inject: () => Promise.resolve(0),
  },
  saslSsl,
];

function parseLogLine(line: string): Record<string, unknown> | undefined {
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

/** The environment that shifts one process's clock: libfaketime when installed, else a Node preload shim. */
function skewedClock(faketime: string, offsetMs: number): { env: Record<string, string>; how: string } {
  const library = ['/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib']
    .map((dir) => join(dir, 'faketime', 'libfaketime.so.1'))
    .find((path) => existsSync(path));
  if (library) {
    return {
      env: { LD_PRELOAD: library, FAKETIME: faketime, FAKETIME_DONT_FAKE_MONOTONIC: '1' },
      how: `libfaketime (${library}, FAKETIME=${faketime})`,
    };
  }
  return {
    env: {
      NODE_OPTIONS: `--require ${join(root, 'scripts', 'lib', 'skew-clock.cjs')}`,
      CLOCK_SKEW_MS: String(offsetMs),
    },
    how: `a Node preload shim (scripts/lib/skew-clock.cjs, ${offsetMs} ms): libfaketime is not installed`,
  };
}
