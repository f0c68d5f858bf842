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
  DEFAULT_SNS_LIMITS,
  isSnsTopicArn,
  parseSnsEnvelope,
  SNS_MAX_BODY_BYTES,
  SNS_MAX_MESSAGE_BYTES,
  snsCertificateUrl,
  snsConfirmationUrl,
  snsStringToSign,
  verifySnsSignature,
  type SnsEnvelope,
  type SnsEnvelopeParse,
  type SnsLimits,
  type SnsMessageType,
  type SnsOriginCheck,
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
