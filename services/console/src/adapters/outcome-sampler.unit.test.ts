import { describe, expect, it } from 'vitest';
import { parseSamples } from './prometheus-text.js';
import { OutcomeSampler, outcomeCounters } from './outcome-sampler.js';
import { backlogOf, sendRates } from './overview-figures.js';

const exposition = (sent: number, start = 1700000000) => `# HELP outreach_sender_sends_total Terminal outcomes
# TYPE outreach_sender_sends_total counter
outreach_sender_sends_total{outcome="sent"} ${sent}
outreach_sender_sends_total{outcome="failed"} 2
process_start_time_seconds ${start}
outreach_build_info{version="1",commit="x",node_version="24"} 1
`;

describe('outcomeCounters', () => {
  it('reads the outcome counters and the process that answered', () => {
    expect(outcomeCounters(parseSamples(exposition(7)))).toEqual({
      process: '1700000000',
      counts: { sent: 7, failed: 2 },
    });
  });

  it('is zero for a sender that recorded nothing yet, and undefined for something else', () => {
    expect(outcomeCounters(parseSamples('outreach_build_info{version="1"} 1\nprocess_start_time_seconds 5\n'))).toEqual(
      {
        process: '5',
        counts: {},
      },
    );
    expect(outcomeCounters(parseSamples('up 1\n'))).toBeUndefined();
  });
});

describe('OutcomeSampler', () => {
  it('samples the sender into its ring buffer; a failed read is a gap with its reason', async () => {
    let clock = 0;
    const answers = [
      { status: 200, body: exposition(10), message: '' },
      { status: 0, body: undefined, message: 'connection refused' },
      { status: 200, body: exposition(40), message: '' },
      { status: 200, body: exposition(70), message: '' },
    ];
    const sampler = new OutcomeSampler(
      { open: async () => answers.shift() ?? { status: 503, body: '', message: '' } },
      15_000,
      60_000,
      () => clock,
    );
    expect(sampler.series.capacity).toBe(5);
    for (const step of [0, 1, 2, 3]) {
      clock = step * 15_000;
      await sampler.sampleOnce();
      if (step === 1) expect(sampler.lastError).toBe('connection refused');
    }
    expect(sampler.lastError).toBeUndefined();
    const points = sampler.series.rates();
    // 10 -> (gap) -> 40 over 30 s, then 40 -> 70 over 15 s.
    expect(points.map((p) => p.perSecond.sent)).toEqual([1, 2]);
    expect(sendRates(points)).toEqual({ now: 2, mean: 60 / 45 });
    await sampler.stop();
  });

  it('never runs two reads at once', async () => {
    let calls = 0;
    let release: () => void = () => undefined;
    const sampler = new OutcomeSampler(
      {
        open: () => {
          calls += 1;
          return new Promise((resolve) => {
            release = () => resolve({ status: 200, body: exposition(1), message: '' });
          });
        },
      },
      1_000,
      60_000,
    );
    const first = sampler.sampleOnce();
    const second = sampler.sampleOnce();
    release();
    await Promise.all([first, second]);
    expect(calls).toBe(1);
  });
});

describe('backlogOf', () => {
  it('sums lag by group and topic and reads the outbox gauges', () => {
    const samples = parseSamples(`outreach_consumer_lag_messages{group="g",topic="t",partition="0"} 3
outreach_consumer_lag_messages{group="g",topic="t",partition="1"} 4
outreach_consumer_lag_messages{group="g",topic="u",partition="0"} 0
outreach_outbox_oldest_unpublished_age_seconds 12.5
outreach_outbox_parked_rows 2
`);
    expect(backlogOf('sender', samples)).toEqual({
      service: 'sender',
      lag: 7,
      lagByTopic: [
        { group: 'g', topic: 't', lag: 7 },
        { group: 'g', topic: 'u', lag: 0 },
      ],
      outboxAgeSeconds: 12.5,
      parkedRows: 2,
    });
    expect(backlogOf('planner', []).lag).toBeUndefined();
  });
});
