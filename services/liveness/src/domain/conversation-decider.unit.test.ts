/** The Conversation decider: given what is stored of a conversation, when it is projected, then its projection (and recovery). */
import { uuidV5, type ConversationStalled } from '@outreach/contracts';
import { deciderSpec } from '@outreach/testkit';
import { describe, expect, it } from 'vitest';
import {
  conversationDecider,
  type ConversationChange,
  type ConversationProjected,
  type ProjectConversation,
  type StoredConversation,
} from './conversation-decider.js';
import {
  deadlines,
  project,
  stallDeadline,
  type ConversationInput,
  type Graces,
  type TimedInput,
} from './conversation.js';

const graces = { inboundMs: 60_000, outboundMs: 3_600_000, overdueMs: 300_000, replyWindowMs: 7_200_000 };
const given = deciderSpec<StoredConversation, ProjectConversation, ConversationChange>(conversationDecider);

let n = 0;
const at = (time: number, input: ConversationInput): TimedInput => ({
  eventId: `e${String(++n).padStart(4, '0')}`,
  at: time,
  input,
});
const stored = (event: TimedInput): ConversationChange => ({ type: 'ConversationEventStored', event });
/** The envelope and ids of an event the sweep writes about conv-1 on its own (no cause). */
const ofSweep = (eventId: string, occurredAt: number) => ({
  eventId,
  occurredAt,
  producer: 'liveness',
  correlationId: 'conv-1',
  causationId: null,
  conversationId: 'conv-1',
  campaignId: 'camp',
  candidateKey: 'cand',
});
const flagged = (reason: ConversationStalled['reason'], since: number, detectedAt: number): ConversationStalled => ({
  type: 'ConversationStalled',
  ...ofSweep(uuidV5('conversation-stalled', 'conv-1', 'n'), detectedAt),
  reason,
  since,
  detectedAt,
});
const projectAt = (now: number, cause: ProjectConversation['cause'] = null): ProjectConversation => ({
  type: 'ProjectConversation',
  conversationId: 'conv-1',
  now,
  defaults: graces,
  cause,
});
const projection = (history: readonly TimedInput[], applied: Graces = graces): ConversationProjected => {
  const state = project(history);
  const due = deadlines(state, applied);
  return {
    type: 'ConversationProjected',
    conversationId: 'conv-1',
    state,
    deadlines: due,
    stallDeadline: stallDeadline(due),
    empty: history.length === 0,
  };
};

describe('the Conversation decider', () => {
  const message = at(0, { type: 'MessageReceived' });
  const answer = at(70_000, { type: 'NextStepScheduled', stepId: 'reply', dueAt: 80_000 });

  it('projects the stored events, in event-time order whatever the order they were stored in', () => {
    given([stored(answer), stored(message)])
      .when(projectAt(75_000))
      .then([projection([message, answer])]);
  });

  it('a conversation not flagged is projected, not recovered, even when no stall holds', () => {
    given([stored(message), stored(answer)])
      .when(projectAt(75_000))
      .then([projection([message, answer])]);
  });

  it('a flagged conversation that no longer stalls recovers, caused by the first event of the batch', () => {
    given([stored(message), flagged('no_next_step', 0, 61_000), stored(answer)])
      .when(projectAt(75_000, { eventId: answer.eventId, correlationId: 'corr-answer' }))
      .then([
        projection([message, answer]),
        {
          type: 'ConversationRecovered',
          // Named by the stall it ends: the first flag.
          eventId: uuidV5('conversation-recovered', 'conv-1', '1'),
          occurredAt: 75_000,
          producer: 'liveness',
          correlationId: 'corr-answer',
          causationId: answer.eventId,
          conversationId: 'conv-1',
          campaignId: 'camp',
          candidateKey: 'cand',
          reason: 'no_next_step',
          recoveredAt: 75_000,
        },
      ]);
  });

  it('a recovery with no event of the batch under it (a send moved away) is correlated by the conversation', () => {
    given([stored(message), flagged('no_next_step', 0, 61_000), stored(answer)])
      .when(projectAt(75_000))
      .then([
        projection([message, answer]),
        expect.objectContaining({ type: 'ConversationRecovered', correlationId: 'conv-1', causationId: null }),
      ]);
  });

  it('a flagged conversation still stalled (now by its overdue step) keeps its flag', () => {
    given([stored(message), flagged('no_next_step', 0, 61_000), stored(answer)])
      .when(projectAt(380_000))
      .then([projection([message, answer])]);
  });

  it('a flagged conversation whose stall still holds keeps its flag', () => {
    given([stored(message), flagged('no_next_step', 0, 61_000)])
      .when(projectAt(75_000))
      .then([projection([message])]);
  });

  it('a recovery is named by the flag it lifts: the second stall recovers under the second name', () => {
    const later = at(400_000, { type: 'MessageReceived' });
    const answered = at(470_000, { type: 'NextStepScheduled', stepId: 'again', dueAt: 10_000_000 });
    const history: ConversationChange[] = [
      stored(message),
      flagged('no_next_step', 0, 61_000),
      stored(answer),
      { type: 'ConversationRecovered', ...recoveredFields(75_000) },
      stored(later),
      flagged('no_next_step', 400_000, 461_000),
      stored(answered),
    ];
    given(history)
      .when(projectAt(475_000))
      .then([
        expect.objectContaining({ type: 'ConversationProjected' }),
        expect.objectContaining({
          type: 'ConversationRecovered',
          eventId: uuidV5('conversation-recovered', 'conv-1', '2'),
        }),
      ]);
  });

  it("projects with its campaign's graces, the service's reply window when the campaign sets none", () => {
    const campaign = { inboundMs: 1_000, outboundMs: 2_000, overdueMs: 3_000, replyWindowMs: null };
    given([{ type: 'CampaignGracesSet', graces: campaign }, stored(message)])
      .when(projectAt(500))
      .then([projection([message], { ...campaign, replyWindowMs: graces.replyWindowMs })]);
    // Flagged, nothing answered: at 50 s the stall holds under the campaign's 1 s grace, not under the default minute.
    const stalled = [stored(message), flagged('no_next_step', 0, 1_000)];
    given([{ type: 'CampaignGracesSet', graces: campaign }, ...stalled])
      .when(projectAt(50_000))
      .then([projection([message], { ...campaign, replyWindowMs: graces.replyWindowMs })]);
    given(stalled)
      .when(projectAt(50_000))
      .then([projection([message]), expect.objectContaining({ type: 'ConversationRecovered' })]);
  });

  it('a conversation left without events is projected empty (the store removes it unless ever flagged)', () => {
    given([])
      .when(projectAt(1_000))
      .then([projection([])]);
  });

  it('folds the flag and its lifting into the state; the projection is derived, not kept', () => {
    given([stored(message), flagged('next_step_overdue', 0, 61_000)]).thenState({
      history: [message],
      flag: { reason: 'next_step_overdue', campaignId: 'camp', candidateKey: 'cand' },
      stallCount: 1,
      graces: null,
    });
    given([
      stored(message),
      flagged('no_next_step', 0, 61_000),
      { type: 'ConversationRecovered', ...recoveredFields(75_000) },
      projection([message]),
    ]).thenState({ history: [message], flag: null, stallCount: 1, graces: null });
  });
});

function recoveredFields(now: number) {
  return {
    ...ofSweep(uuidV5('conversation-recovered', 'conv-1', '1'), now),
    reason: 'no_next_step' as const,
    recoveredAt: now,
  };
}
