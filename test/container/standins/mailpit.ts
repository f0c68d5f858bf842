/**
 * The compose test's Mailpit (test/container/standins/mailpit): the project's SMTP sink, SMTP on 1025
 * and the Mailpit search API on 8025, on every address of its container. Keeps what it receives
 * until it stops (SIGTERM).
 */
import { SmtpSink } from '@outreach/testkit';

const sink = await new SmtpSink({ host: '0.0.0.0', port: 1025 }).start();
await sink.startMailpitApi({ host: '0.0.0.0', port: 8025 });
process.stdout.write('mailpit stand-in: SMTP on 1025, API on 8025\n');
process.once('SIGTERM', () => {
  void sink.stop().then(() => process.exit(0));
});
