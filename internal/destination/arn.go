package destination

import (
	"errors"
	"regexp"
	"strings"
)

// ARN is an Amazon Resource Name split into its parts:
// arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE (the resource may hold more colons).
type ARN struct{ Partition, Service, Region, AccountID, Resource string }

// String joins the parts back into the ARN.
func (a ARN) String() string {
	return "arn:" + a.Partition + ":" + a.Service + ":" + a.Region + ":" + a.AccountID + ":" + a.Resource
}

var errNotARN = errors.New("not an ARN (an ARN looks like arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE)")

// ParseARN splits s into its parts. It checks the shape only (six parts, no blanks where
// a part is always present); which partition, region and account are acceptable is
// Validate's business. The error never repeats s.
func ParseARN(s string) (ARN, error) {
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return ARN{}, errors.New("not an ARN (it contains spaces or control characters)")
	}
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" {
		return ARN{}, errNotARN
	}
	a := ARN{Partition: parts[1], Service: parts[2], Region: parts[3], AccountID: parts[4], Resource: parts[5]}
	switch {
	case a.Partition == "":
		return ARN{}, errors.New("not an ARN (the partition, arn:PARTITION:…, is missing)")
	case a.Service == "":
		return ARN{}, errors.New("not an ARN (the service, arn:aws:SERVICE:…, is missing)")
	case a.Resource == "":
		return ARN{}, errors.New("not an ARN (the resource, after the account, is missing)")
	}
	return a, nil
}

// Partition is the only AWS partition the relay writes into.
const Partition = "aws"

var (
	commercialRegion = regexp.MustCompile(`^(us|eu|ap|ca|sa|me|af|il|mx)-(central|north|south|east|west|northeast|northwest|southeast|southwest)-[1-9][0-9]?$`)
	accountID        = regexp.MustCompile(`^[0-9]{12}$`)
)

// CheckRegion returns why region is not a commercial AWS region, or "" when it is one.
// GovCloud (us-gov-*), China (cn-*) and the isolated regions (*-iso*) are refused.
func CheckRegion(region string) string {
	switch {
	case region == "":
		return "the region is missing: name a commercial AWS region like us-east-1"
	case strings.HasPrefix(region, "us-gov-"):
		return "region " + region + " is a GovCloud region: only commercial AWS regions are supported"
	case strings.HasPrefix(region, "cn-"):
		return "region " + region + " is a China region: only commercial AWS regions are supported"
	case strings.Contains(region, "-iso"):
		return "region " + region + " is an isolated (ISO) region: only commercial AWS regions are supported"
	case !commercialRegion.MatchString(region):
		return "region " + region + " is not a commercial AWS region (like us-east-1 or eu-west-1)"
	}
	return ""
}

// IsAccountID reports whether s is a 12-digit AWS account id.
func IsAccountID(s string) bool { return accountID.MatchString(s) }
