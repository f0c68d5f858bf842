/**
 * Synthetic open conversations for load tests (cli/seed.ts). Each is one real event folded by the
 * domain, as the projection would fold it, so the rows obey the same rules as real ones:
 * `open - due` healthy conversations have a next step scheduled a day ahead; `due` have an inbound
 * message left unanswered until a minute past its deadline (the sweep flags them `no_next_step`).
 */
import type { ConversationsRepository } from '../adapters/conversations-repository.js';
import { refold, type ConversationInput, type TimedInput } from '../domain/conversation.js';

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;

export async function seedConversations(
  repository: ConversationsRepository,
  options: { readonly campaignId: string; readonly open: number; readonly due: number },
): Promise<{ kind: 'seeded'; count: number } | { kind: 'campaign-in-use' }> {
  const graces = await repository.graces(options.campaignId);
  const now = await repository.now();
  const fold = (at: number, input: ConversationInput) => {
    const event: TimedInput = { eventId: 'seed', at, input };
    return { event, folded: refold([event], graces, now, false) };
  };
  const healthy = fold(now, { type: 'NextStepScheduled', stepId: 'seed-next-step', dueAt: now + DAY });
  // Whatever the campaign's graces: the deadline of a message at 0 is its grace, so this one's fell a minute ago.
  const deadlineAfter = fold(0, { type: 'MessageReceived' }).folded.stallDeadline as number;
  const stalled = fold(now - deadlineAfter - MINUTE, { type: 'MessageReceived' });
  return repository.seedSynthetic(options.campaignId, [
    { count: options.due, ...stalled },
    { count: options.open - options.due, ...healthy },
  ]);
}
