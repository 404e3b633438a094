package s3io

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"
)

// Defaults applied by NewStore to zero Config fields.
const (
	DefaultRequestTimeout  = 30 * time.Second
	DefaultTransferTimeout = 5 * time.Minute
	// DefaultMaxIdleConnsPerHost is the idle connections kept to the endpoint. The SDK's
	// default is 10: with more requests in flight than that (a remote reader runs up to
	// read_max_concurrency range GETs, uploads run beside it), every GET above ten dialled a
	// new connection and closed it after.
	DefaultMaxIdleConnsPerHost = 64
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

	// MaxIdleConnsPerHost is how many idle connections to the endpoint are kept for reuse;
	// it should be at least the most requests the node runs at once (0:
	// DefaultMaxIdleConnsPerHost).
	MaxIdleConnsPerHost int

	// ListPageSize is the MaxKeys of each list request; 0 leaves it to the server (1000).
	ListPageSize int32
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
	if c.MaxIdleConnsPerHost < 0 {
		errs = append(errs, fmt.Errorf("s3 max idle connections per host: %d is negative", c.MaxIdleConnsPerHost))
	}
	if c.ListPageSize < 0 || c.ListPageSize > 1000 {
		errs = append(errs, fmt.Errorf("s3 list page size: %d, want 0 (server default) to 1000", c.ListPageSize))
	}
	return errors.Join(errs...)
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
	if c.MaxIdleConnsPerHost == 0 {
		c.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	return c
}
