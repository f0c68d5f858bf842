/**
 * Issue #14 as it happened: Avro bombs (a ~100-byte OutreachRequested whose `contents` claims 2^30
 * items, and the other shapes of eventBombs) published to the planner, running as a process, among
 * valid requests. Before the decoder's guard, the first bomb grew the planner past 2 GB and killed
 * it, and every replica after it. Now each bomb of a type it takes is dead-lettered with its code
 * (the others it skips unread), every valid request is planned, the process is never restarted, and
 * its RSS stays within a bound.
 */
import { existsSync, readFileSync } from 'node:fs';
import { EventProducer, type RawRecord } from '@outreach/shared';
import { eventCodec, type OutreachRequested, type SendRequested } from '@outreach/contracts';
import { eventBombs, freePort, readTopic, waitFor, type ServiceTestEnv } from '@outreach/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { outreachRequested, plannerTestEnv } from './harness.js';

const MiB = 1024 * 1024;
let planner: ServiceTestEnv | undefined;
afterEach(async () => {
  await planner?.cleanup();
  planner = undefined;
});

/** Resident set size of a process, from Linux's /proc. */
function rssBytes(pid: number): number {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('VmRSS:'));
    return Number(/(\d+)/.exec(line ?? '')?.[1] ?? NaN) * 1024;
  } catch {
    return 0; // gone: the exit code assertions below say so
  }
}

const request = (candidateId: string) => outreachRequested({ requestId: `req-${candidateId}`, candidateId });

describe.skipIf(!existsSync('/proc/self/status'))('planner under Avro bombs', () => {
  it(
    'dead-letters every bomb of a type it takes, skips the others unread, plans every valid request, never restarts, and keeps its RSS bounded',
    {
      timeout: 180_000,
    },
    async () => {
      // No experiment in these requests: the experiment service is never called.
      const env = await plannerTestEnv({ EXPERIMENT_URL: 'http://127.0.0.1:9', SCHEDULER_INTERVAL_MS: '100' });
      planner = env;
      const port = await freePort();
      const proc = env.startProcess({ HTTP_PORT: String(port) });
      const pid = proc.child.pid as number;
      await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/health/ready`).catch(() => null))?.ok, {
        timeoutMs: 60_000,
        description: 'the planner process ready',
      }).catch((error: unknown) => {
        throw new Error(`${String(error)}\n${[...proc.stdoutLines, ...proc.stderrLines].slice(-20).join('\n')}`);
      });
      const sends = (count: number) =>
        readTopic(env.kafka, env.topic('sendRequested'), (m) => m.length >= count, 60_000).then((m) =>
          m.map((x) => eventCodec.decode(x.value as Buffer) as SendRequested),
        );

      // Warm up (JIT, pools, first batches) so the baseline is the planner at work, not at rest.
      await env.publish(
        'outreachRequested',
        Array.from({ length: 5 }, (_, i) => request(`warm-${i}`)),
      );
      await sends(5);
      const baseline = rssBytes(pid);
      let peak = baseline;
      const sampler = setInterval(() => {
        peak = Math.max(peak, rssBytes(pid));
      }, 25);

      const rounds = 5;
      const bombs = eventBombs();
      const valid: OutreachRequested[] = [];
      const raw = new EventProducer(env.kafka);
      try {
        for (let round = 0; round < rounds; round++) {
          const requested: RawRecord[] = [];
          const conversation: RawRecord[] = [];
          for (const [i, bomb] of bombs.entries()) {
            const record = { key: `bomb-${round}-${i}`, value: bomb.bytes, headers: { 'bomb-code': bomb.code } };
            // Each to a topic the planner consumes; the decoder goes by fingerprint, not by topic.
            (bomb.type === 'OutreachRequested' ? requested : conversation).push(record);
            const event = request(`cand-${round}-${i}`);
            valid.push(event);
            requested.push({ key: event.candidateId, value: eventCodec.encode(event), headers: {} });
          }
          await raw.publishRaw([
            { topic: env.topic('outreachRequested'), records: requested },
            { topic: env.topic('conversationEvents'), records: conversation },
          ]);
        }
        const planned = await sends(5 + valid.length);
        expect(new Set(planned.map((s) => s.requestId))).toEqual(
          new Set([...valid.map((r) => r.requestId), ...Array.from({ length: 5 }, (_, i) => `req-warm-${i}`)]),
        );
        const requestBombs = bombs.filter((b) => b.type === 'OutreachRequested').length;
        const dead = await readTopic(
          env.kafka,
          `${env.topic('outreachRequested')}.dlq`,
          (m) => m.length >= rounds * requestBombs,
          60_000,
        );
        expect(dead).toHaveLength(rounds * requestBombs);
        // The conversation topic's bombs are of types the planner does not take (StepCompleted): its
        // consumer skips them by their schema fingerprint, unread, so they cannot touch its memory;
        // the consumer that takes them (liveness) dead-letters them. Counted as handled, none dead.
        const conversationTopic = env.topic('conversationEvents');
        const consumed = async (result: string) => {
          const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
          return text
            .split('\n')
            .filter(
              (l) =>
                l.startsWith('outreach_consumer_messages_total{') &&
                l.includes(`topic="${conversationTopic}"`) &&
                l.includes(`result="${result}"`),
            )
            .reduce((sum, l) => sum + Number(l.split(' ').at(-1)), 0);
        };
        await waitFor(async () => (await consumed('handled')) >= rounds * (bombs.length - requestBombs), {
          timeoutMs: 60_000,
          description: "the conversation topic's bombs passed over",
        });
        expect(await consumed('dead_lettered')).toBe(0);
        for (const message of dead) {
          expect(message.headers['dlq-error-code'], message.key ?? '').toBe(message.headers['bomb-code']);
          expect(message.headers['dlq-reason']).toMatch(/^\w+ body: \S+: .+ \(at byte \d+\)$/);
        }
      } finally {
        clearInterval(sampler);
        await raw.disconnect();
      }

      // Never restarted: the same process, alive, its consumer never crashed.
      expect(proc.child.exitCode).toBeNull();
      expect(proc.child.signalCode).toBeNull();
      expect(proc.stdoutLines.some((l) => l.includes('consumer crashed'))).toBe(false);
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      expect(metrics).not.toMatch(/^outreach_consumer_crashes_total\{[^}]*\} [1-9]/m);
      // Unguarded, one bomb takes the process past 2 GB. Here the bombs cost nothing measurable.
      expect(peak - baseline, `RSS ${baseline} → peak ${peak}`).toBeLessThan(128 * MiB);
    },
  );
});
