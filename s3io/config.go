package s3io

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Defaults applied by NewStore to zero Config fields.
const (
	DefaultRequestTimeout  = 30 * time.Second
	DefaultTransferTimeout = 5 * time.Minute
	// DefaultMaxConns is the connections to the endpoint at most: the node's default upload
	// bound (24), a remote reader at its default ceiling (32), and room for the small
	// requests (persists, resolutions, deletes, lists). The SDK's own default keeps only 10
	// idle per host: with more requests in flight, every one above ten dialled anew.
	DefaultMaxConns = 72
)

// Config says which S3 endpoint and bucket a Store talks to and how long a call may take.
// Credentials come from AccessKey/SecretKey when both are set, else from the standard AWS
// chain (environment, shared files, web identity, instance role).
type Config struct {
	Endpoint  string // base URL ("http://127.0.0.1:7070"); empty means AWS's own endpoint for Region
	Region    string // signing region, e.g. "us-east-1"
	Bucket    string
	PathStyle bool // path-style addressing (http://host/bucket/key) instead of virtual-host

	AccessKey    string
	SecretKey    string
	SessionToken string // optional, with AccessKey/SecretKey

	// CAFile is an optional PEM bundle trusted for TLS in addition to the system roots
	// (a private endpoint, a test server). AWS_CA_BUNDLE also works.
	CAFile string

	// RequestTimeout bounds every small request (HEAD, small PUT/GET, list page, delete batch).
	RequestTimeout time.Duration
	// TransferTimeout bounds a fragment PUT or a whole-fragment GET.
	TransferTimeout time.Duration

	// KeyPrefix is the key prefix of the streams (default manifest.DefaultKeyPrefix): the
	// store counts each stream's requests by the stream prefix their key lies under.
	KeyPrefix string

	// ListPageSize is the MaxKeys of each list request; 0 leaves it to the server (1000).
	ListPageSize int32

	// MaxConns bounds the HTTP connections to the endpoint, and the idle ones kept for
	// reuse (0: DefaultMaxConns). Size it to the governor's max_concurrent_uploads plus
	// room for small requests: fewer makes uploads wait for a connection, more only lets
	// descriptors pile up. A request waiting for a connection is bounded by its timeout.
	MaxConns int
	// DisableKeepAlives makes the client pool no connection: for an endpoint that closes
	// every connection after its answer anyway (the embedded one). Go's transport finishes
	// a dial whose request was canceled meanwhile and pools the connection; such a
	// connection never carries a request, and the embedded gateway's stop waits 10 s for
	// it (it counts a connection active until its first request).
	DisableKeepAlives bool
	// SSE is the server-side encryption asked for on every object PUT: "" (none asked: the
	// bucket's default applies, SSE-S3 on AWS since 2023), SSEAES256 (SSE-S3) or SSEKMS.
	SSE string
	// SSEKMSKeyID is the KMS key of SSEKMS; empty uses the account's default aws/s3 key.
	SSEKMSKeyID string
	// ExpectedBucketOwner, when set, is the AWS account id (12 digits) the bucket must
	// belong to: sent with every request, so that S3 refuses (403) a request to a bucket
	// of the same name owned by someone else.
	ExpectedBucketOwner string
}

// Server-side encryption modes (Config.SSE).
const (
	SSEAES256 = "AES256"  // SSE-S3: keys managed by S3
	SSEKMS    = "aws:kms" // SSE-KMS
)

func (c Config) sse() types.ServerSideEncryption { return types.ServerSideEncryption(c.SSE) }

func (c Config) kmsKey() *string {
	if c.SSEKMSKeyID == "" {
		return nil
	}
	return &c.SSEKMSKeyID
}

func (c Config) owner() *string {
	if c.ExpectedBucketOwner == "" {
		return nil
	}
	return &c.ExpectedBucketOwner
}

// Validate refuses a configuration that cannot work, naming the setting that is wrong.
func (c Config) Validate() error {
	var errs []error
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("s3 endpoint %q: %w", c.Endpoint, err))
		case u.Scheme != "http" && u.Scheme != "https":
			errs = append(errs, fmt.Errorf("s3 endpoint %q: scheme must be http or https", c.Endpoint))
		case u.Host == "":
			errs = append(errs, fmt.Errorf("s3 endpoint %q: no host", c.Endpoint))
		case u.RawQuery != "" || u.Fragment != "":
			errs = append(errs, fmt.Errorf("s3 endpoint %q: must not carry a query or fragment", c.Endpoint))
		}
	}
	if c.Region == "" {
		errs = append(errs, errors.New("s3 region: required (for example us-east-1)"))
	}
	if err := validateBucketName(c.Bucket); err != nil {
		errs = append(errs, err)
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		errs = append(errs, errors.New("s3 access key and secret key: set both or neither (neither uses the standard AWS credential chain)"))
	}
	if c.SessionToken != "" && c.AccessKey == "" {
		errs = append(errs, errors.New("s3 session token: only valid with an access key and secret key"))
	}
	if c.CAFile != "" {
		if _, err := os.Stat(c.CAFile); err != nil {
			errs = append(errs, fmt.Errorf("s3 CA file: %w", err))
		}
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("s3 request timeout: %v is negative", c.RequestTimeout))
	}
	if c.TransferTimeout < 0 {
		errs = append(errs, fmt.Errorf("s3 transfer timeout: %v is negative", c.TransferTimeout))
	}
	if c.MaxConns < 0 {
		errs = append(errs, fmt.Errorf("s3 max connections: %d is negative", c.MaxConns))
	}
	if c.ListPageSize < 0 || c.ListPageSize > 1000 {
		errs = append(errs, fmt.Errorf("s3 list page size: %d, want 0 (server default) to 1000", c.ListPageSize))
	}
	switch c.SSE {
	case "", SSEAES256, SSEKMS:
	default:
		errs = append(errs, fmt.Errorf("s3 sse %q: want empty (the bucket's default), %s or %s", c.SSE, SSEAES256, SSEKMS))
	}
	if c.SSEKMSKeyID != "" && c.SSE != SSEKMS {
		errs = append(errs, fmt.Errorf("s3 sse kms key id: only with s3_sse %s (s3_sse is %q)", SSEKMS, c.SSE))
	}
	if o := c.ExpectedBucketOwner; o != "" && !isAccountID(o) {
		errs = append(errs, fmt.Errorf("s3 expected bucket owner %q: want an AWS account id of 12 digits", o))
	}
	return errors.Join(errs...)
}

func isAccountID(s string) bool {
	if len(s) != 12 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// validateBucketName applies S3's bucket naming rules: 3 to 63 characters of lowercase
// letters, digits, dots and hyphens, starting and ending with a letter or digit.
func validateBucketName(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("s3 bucket %q: %d characters, want 3 to 63", b, len(b))
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if (i == 0 || i == len(b)-1) && !alnum {
			return fmt.Errorf("s3 bucket %q: must start and end with a lowercase letter or digit", b)
		}
		if !alnum && c != '.' && c != '-' {
			return fmt.Errorf("s3 bucket %q: character %q at %d (allowed: a-z 0-9 . -)", b, c, i)
		}
	}
	return nil
}

// withDefaults fills zero timeouts.
func (c Config) withDefaults() Config {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.TransferTimeout == 0 {
		c.TransferTimeout = DefaultTransferTimeout
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	return c
}
