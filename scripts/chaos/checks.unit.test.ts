import type { DeliveredMessage } from '@outreach/testkit';
import { describe, expect, it } from 'vitest';
import { judge, type Evidence } from './checks.js';
import { countersOf } from './sender-metrics.js';

const ids = ['00000000-0000-4000-8000-000000000001', '00000000-0000-4000-8000-000000000002'];
const delivery = (sendId: string, n: number): DeliveredMessage => ({
  from: 'outreach@sender.test',
  to: [`cand-${n}@example.com`],
  messageId: `<${sendId}.k1.ab@outreach.test>`,
  subject: undefined,
  headers: new Map([['x-outreach-campaign', 'chaos']]),
  text: undefined,
  receivedAt: 0,
  secure: false,
  user: undefined,
  envelopeId: undefined,
  notify: new Map(),
});
const evidence = (overrides: Partial<Evidence>): Evidence => ({
  expected: new Set(ids),
  log: [
    { sendId: ids[0] as string, status: 'sent' },
    { sendId: ids[1] as string, status: 'ambiguous' },
  ],
  deliveries: [delivery(ids[0] as string, 1)],
  inFlightAtFaults: 8,
  cut: 0,
  ...overrides,
});

describe('judge: ambiguous sends left', () => {
  it('allows as many as were in flight at the faults where nothing settles them', () => {
    expect(judge(evidence({}))).toMatchObject({ ambiguous: 1, ambiguousBound: 8, violations: [] });
  });

  it('allows none where the provider reports every message it takes', () => {
    const verdict = judge(evidence({ evidenceSettles: true }));
    expect(verdict).toMatchObject({ ambiguous: 1, ambiguousBound: 0 });
    expect(verdict.violations).toEqual(['1 ambiguous sends left, though the provider reports every message it takes']);
    const settled = judge(
      evidence({
        evidenceSettles: true,
        log: [
          { sendId: ids[0] as string, status: 'sent' },
          { sendId: ids[1] as string, status: 'failed' },
        ],
      }),
    );
    expect(settled.violations).toEqual([]);
  });

  it('counts every forged report the sender trusted as a violation', () => {
    const verdict = judge(evidence({ forgeriesTrusted: ['/v1/feedback/dsn for x: 200 {"unverified":0}'] }));
    expect(verdict.violations).toEqual([
      '1 forged delivery evidence reports trusted (/v1/feedback/dsn for x: 200 {"unverified":0})',
    ]);
  });

  it('counts every evidence report the sender refused as a violation', () => {
    const verdict = judge(evidence({ evidenceRefused: ['422 not a usable DSN', '403 bad signature'] }));
    expect(verdict.violations).toEqual([
      '2 delivery evidence reports refused by the sender (422 not a usable DSN; 403 bad signature)',
    ]);
  });
});

describe('countersOf', () => {
  it('reads the settled-by-evidence, lookup-decision and evidence series, and nothing else', () => {
    const text = [
      '# HELP outreach_sender_settled_by_evidence_total Sends in doubt settled sent by delivery evidence',
      '# TYPE outreach_sender_settled_by_evidence_total counter',
      'outreach_sender_settled_by_evidence_total{source="sendgrid",from="sending"} 7',
      'outreach_sender_settled_by_evidence_total{source="dsn",from="ambiguous"} 2',
      'outreach_sender_settled_by_evidence_total{source="dsn",from="claimed"} 0',
      'outreach_sender_lookup_decisions_total{status="sending",decision="pending"} 12',
      'outreach_sender_lookup_decisions_total{status="sending",decision="not_sent"} 3',
      'outreach_sender_delivery_evidence_total{source="sendgrid",outcome="settled"} 7',
      'outreach_sender_lookup_decisions_total 99',
      'outreach_sender_lease_takeovers_total{reason="x"} 4',
    ].join('\n');
    expect(countersOf(text)).toEqual({
      outreach_sender_settled_by_evidence_total: { 'sendgrid from sending': 7, 'dsn from ambiguous': 2 },
      outreach_sender_lookup_decisions_total: { 'sending → pending': 12, 'sending → not_sent': 3 },
      outreach_sender_delivery_evidence_total: { 'sendgrid settled': 7 },
    });
  });
});
