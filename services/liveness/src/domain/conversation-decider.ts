/**
 * The Conversation aggregate as the projection keeps it, as a decider (`Decider`, '@outreach/shared').
 * Its state is what is stored of it: its events, the sweep's flag, and its campaign's graces. The
 * command projects it at a time (the database clock); the decision is its projection (the fold of
 * its events, its deadlines, whether any event is left under it) and, when it was flagged and no
 * stall holds any more, its recovery (ConversationRecovered). Pure: no clock, no IO.
 *
 * What is not decided here, and why: the events are stored before the decision, set-based, with
 * the filing of sends by their step (the repository's `record`), and `ConversationEventStored` is how
 * the state holds them; the sweep flags stalls and closes conversations in set-based SQL generated
 * from the same rules (adapters/stall-sql.ts), and `ConversationStalled` is how the state holds a
 * flag; a campaign's graces are set by the API (`CampaignGracesSet`).
 */
import { uuidV5, type ConversationRecovered, type ConversationStalled, type Decider } from '@outreach/contracts';
import {
  gracesOf,
  refold,
  type ConversationState,
  type Deadlines,
  type GraceSettings,
  type Graces,
  type StallReason,
  type TimedInput,
} from './conversation.js';

/** The sweep's flag: why, and whose conversation (what its recovery names). */
export interface StallFlag {
  readonly reason: StallReason;
  readonly campaignId: string;
  readonly candidateKey: string;
}

export interface StoredConversation {
  /** Every event stored under the conversation, in any order (the fold orders them). */
  readonly history: readonly TimedInput[];
  /** The sweep's flag, while it is up. */
  readonly flag: StallFlag | null;
  /** How often the sweep flagged it: names its stalls and recoveries. */
  readonly stallCount: number;
  /** Its campaign's graces as stored; none: the service's defaults. */
  readonly graces: GraceSettings | null;
}

/** A conversation of which nothing is stored. */
export const initialConversation: StoredConversation = { history: [], flag: null, stallCount: 0, graces: null };

/** An event of the batch that touched the conversation: the one a recovery names as its cause. */
export interface Cause {
  readonly eventId: string;
  readonly correlationId: string;
}

/** Project the conversation (its stored events, the batch's included) at `now`. */
export interface ProjectConversation {
  readonly type: 'ProjectConversation';
  readonly conversationId: string;
  /** The database clock (epoch ms): a flag is lifted if no stall holds at this time. */
  readonly now: number;
  /** The service's graces, for a campaign that has none stored (or no reply window). */
  readonly defaults: Graces;
  /** The first of the batch's events filed under the conversation; none when only a move touched it. */
  readonly cause: Cause | null;
}

/** The conversation's projection: what its row holds. */
export interface ConversationProjected {
  readonly type: 'ConversationProjected';
  readonly conversationId: string;
  readonly state: ConversationState;
  readonly deadlines: Deadlines;
  readonly stallDeadline: number | null;
  /** No event is stored under it any more (its only send moved to the conversation that planned it). */
  readonly empty: boolean;
}

export interface ConversationEventStored {
  readonly type: 'ConversationEventStored';
  readonly event: TimedInput;
}

export interface CampaignGracesSet {
  readonly type: 'CampaignGracesSet';
  readonly graces: GraceSettings;
}

export type ConversationChange =
  ConversationEventStored | ConversationStalled | CampaignGracesSet | ConversationProjected | ConversationRecovered;

/** The recovery of a flagged conversation, caused by (the first of) the events that healed it. */
function recovery(
  conversation: StoredConversation,
  flag: StallFlag,
  command: ProjectConversation,
): ConversationRecovered {
  return {
    type: 'ConversationRecovered',
    eventId: uuidV5('conversation-recovered', command.conversationId, String(conversation.stallCount)),
    occurredAt: command.now,
    producer: 'liveness',
    correlationId: command.cause?.correlationId ?? command.conversationId,
    causationId: command.cause?.eventId ?? null,
    conversationId: command.conversationId,
    campaignId: flag.campaignId,
    candidateKey: flag.candidateKey,
    reason: flag.reason,
    recoveredAt: command.now,
  };
}

/**
 * Re-folds the stored events with the graces that apply (`refold`): always a projection; a recovery
 * too when the conversation was flagged and no stall holds at `now`.
 */
export function decideProjection(
  conversation: StoredConversation,
  command: ProjectConversation,
): readonly (ConversationProjected | ConversationRecovered)[] {
  const { flag } = conversation;
  const graces = gracesOf(conversation.graces, command.defaults);
  const folded = refold(conversation.history, graces, command.now, flag !== null);
  const projected: ConversationProjected = {
    type: 'ConversationProjected',
    conversationId: command.conversationId,
    state: folded.state,
    deadlines: folded.deadlines,
    stallDeadline: folded.stallDeadline,
    empty: conversation.history.length === 0,
  };
  return folded.healed && flag !== null ? [projected, recovery(conversation, flag, command)] : [projected];
}

export function evolveConversation(conversation: StoredConversation, change: ConversationChange): StoredConversation {
  switch (change.type) {
    case 'ConversationEventStored':
      return { ...conversation, history: [...conversation.history, change.event] };
    case 'ConversationStalled':
      return {
        ...conversation,
        flag: { reason: change.reason, campaignId: change.campaignId, candidateKey: change.candidateKey },
        stallCount: conversation.stallCount + 1,
      };
    case 'CampaignGracesSet':
      return { ...conversation, graces: change.graces };
    case 'ConversationRecovered':
      return { ...conversation, flag: null };
    case 'ConversationProjected':
      // The projection is derived from the stored events: nothing more to keep.
      return conversation;
    default: {
      const exhaustive: never = change;
      throw new Error(`unknown conversation change ${JSON.stringify(exhaustive)}`);
    }
  }
}

export const conversationDecider: Decider<StoredConversation, ProjectConversation, ConversationChange> = {
  initialState: initialConversation,
  decide: decideProjection,
  evolve: evolveConversation,
};
