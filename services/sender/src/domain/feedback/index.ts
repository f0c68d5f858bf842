export {
  enhancedStatus,
  feedbackFromSmtpReply,
  normalizeMessageId,
  recipientOf,
  type DeliveryFeedback,
  type FeedbackKind,
  type FeedbackParse,
  type FeedbackSource,
  type SignatureCheck,
} from './feedback.js';
export {
  checkSnsOrigin,
  checkSnsTimestamp,
  DEFAULT_SNS_LIMITS,
  DEFAULT_SNS_TIME_WINDOW,
  isSnsTopicArn,
  parseSnsEnvelope,
  snsCertificateUrl,
  snsConfirmationUrl,
  snsStringToSign,
  verifySnsSignature,
  type SnsEnvelope,
  type SnsEnvelopeParse,
  type SnsLimits,
  type SnsMessageType,
  type SnsOriginCheck,
  type SnsTimeWindow,
} from './sns.js';
export { DEFAULT_SES_LIMITS, parseSesNotification, type SesContext, type SesLimits } from './ses.js';
export {
  DEFAULT_SENDGRID_LIMITS,
  DEFAULT_SENDGRID_TOLERANCE_MS,
  parseSendGridEvents,
  receiveSendGridWebhook,
  SENDGRID_SIGNATURE_HEADER,
  SENDGRID_TIMESTAMP_HEADER,
  sendGridPublicKey,
  verifySendGridSignature,
  type SendGridLimits,
  type SendGridRequest,
  type SendGridVerification,
} from './sendgrid.js';
export { DEFAULT_DSN_LIMITS, parseDeliveryStatusNotification, type DsnLimits } from './dsn.js';
