import { pino, type Logger, type LoggerOptions } from 'pino';

export type { Logger } from 'pino';

export interface LoggerConfig {
  readonly name: string;
  readonly level?: string;
}

/**
 * JSON logs on stdout, one line per event, with the service name on every line.
 * Correlation ids are added by child loggers (`logger.child({ correlationId })`).
 */
export function createLogger(config: LoggerConfig, destination?: pino.DestinationStream): Logger {
  const options: LoggerOptions = {
    name: config.name,
    level: config.level ?? 'info',
    base: { service: config.name },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
    redact: { paths: ['email', '*.email', 'req.headers.authorization'], censor: '[redacted]' },
  };
  return destination ? pino(options, destination) : pino(options);
}
